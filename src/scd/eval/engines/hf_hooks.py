"""What the hf engine adds to its model's forward passes: a steering vector (``--steer``,
:mod:`scd.eval.steering`) and a concept eraser (``--erase``, :mod:`scd.eval.erasure`) -- each a
directory or one read back, checked against the model, switched per evaluation as adapters are
(forward hooks that stay on the model's layers through batching, generation and adapter
switches)."""

from __future__ import annotations

from typing import Any

__all__ = ["Interventions"]


def _read(kind: str, value: Any) -> Any:
    if kind == "steer":
        from scd.eval.steering import Steering, load_steering

        return value if isinstance(value, Steering) else load_steering(value)
    from scd.eval.erasure import Erasure, load_erasure

    return value if isinstance(value, Erasure) else load_erasure(value)


class Interventions:
    """The hooks of one engine, by kind (``steer``, ``erase``)."""

    def __init__(self) -> None:
        self.hooks: dict[str, Any] = {}

    def use(self, engine: Any, kind: str, value: Any) -> Any:
        """Replace ``kind``'s hooks on ``engine``'s model by ``value``'s (a directory, or one
        read back; None: none) and return it read back.

        Raises:
            InputError: one of another model, or of a layer it does not have.
        """
        from scd.models import model_fingerprint

        if (old := self.hooks.pop(kind, None)) is not None:
            old.remove()
        if value is None:
            return None
        found = _read(kind, value)
        found.check_fits(engine.model, model_fingerprint(engine.model_name), kind)
        self.hooks[kind] = found.attach(engine.model, engine.tokenizer)
        return found
