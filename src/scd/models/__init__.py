"""Models: what a ``model`` argument names (directory, Hub id, GGUF file) and GGUF conversion."""

from scd.models.resolve import check_model_spec, is_gguf, resolve_model

__all__ = ["check_model_spec", "is_gguf", "resolve_model"]
