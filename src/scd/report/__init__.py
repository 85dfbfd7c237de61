"""Reports: tables, figures and the self-contained HTML report of a run."""
