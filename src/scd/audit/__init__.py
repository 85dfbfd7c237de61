"""Audits of what a model was trained on: the Stereotype Content Model audit of a corpus's
illness mentions (``scd audit scm``; Mina et al. 2024, section 3.2)."""
