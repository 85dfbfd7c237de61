"""Models: what a ``model`` argument names (directory, Hub id, GGUF file), GGUF conversion,
fingerprints, the chat formatting training and evaluation share, and the planted-bias toy model."""

from scd.models.resolve import (
    check_model_available,
    check_model_spec,
    is_gguf,
    model_fingerprint,
    resolve_model,
)

__all__ = [
    "check_model_available",
    "check_model_spec",
    "is_gguf",
    "model_fingerprint",
    "resolve_model",
]
