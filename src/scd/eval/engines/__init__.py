"""One inference interface, two engines, chosen by name and imported lazily.

An engine takes token ids (formatting and tokenization are shared, engine-free code) and offers

- ``score(requests) -> list[list[float]]``: for each :class:`ChoiceRequest`, the summed
  log-probability of each option's tokens after the prompt (CAPPr-style option scoring);
- ``generate(prompt_ids, max_new_tokens) -> list[str]``: greedy continuations, decoded;
- ``use_adapter(path)``: the LoRA adapter (unmerged) the next calls go through, ``None`` for
  the base model -- so that one loaded base model serves the base evaluation and every
  adapter of a run (:class:`SharedEngine`);
- ``close()``: free the model (GPU memory) before the process goes on to other work.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from scd.errors import InputError

__all__ = ["ENGINES", "ChoiceRequest", "Engine", "SharedEngine", "make_engine", "require_adapter"]

ENGINES = {
    "hf": ("scd.eval.engines.hf", "HFEngine"),
    "vllm": ("scd.eval.engines.vllm", "VLLMEngine"),
}


@dataclass(frozen=True)
class ChoiceRequest:
    """A prompt's token ids and the token ids of each answer option that may follow it."""

    prompt_ids: tuple[int, ...]
    option_ids: tuple[tuple[int, ...], ...]


class Engine(Protocol):
    """What every engine provides."""

    def score(self, requests: list[ChoiceRequest]) -> list[list[float]]: ...

    def generate(self, prompt_ids: list[list[int]], max_new_tokens: int) -> list[str]: ...

    def use_adapter(self, adapter: str | None) -> None: ...

    def close(self) -> None: ...


def require_adapter(adapter: str | Path | None) -> None:
    """Refuse an ``--adapter`` that is not a PEFT adapter directory."""
    if adapter and not (Path(adapter) / "adapter_config.json").is_file():
        raise InputError(f"--adapter {adapter}: no adapter_config.json (a PEFT adapter dir)")


def _flag(option: str) -> str:
    return "--" + option.replace("_", "-")


def make_engine(
    name: str,
    model: str,
    *,
    tokenizer: Any = None,
    adapters: Sequence[str] = (),
    **options: Any,
) -> Engine:
    """Build the engine ``name`` ("hf" or "vllm") for ``model`` (path or Hub id).

    ``adapters``: every LoRA adapter the engine will be asked to use (vLLM sizes its LoRA
    slots from them); ``options``: engine options, ``None`` meaning "the engine's default".
    An option the engine does not take is refused, naming its flag.

    Raises:
        InputError: unknown engine name, an option of the other engine, or the engine cannot
            be used here.
    """
    if name not in ENGINES:
        raise InputError(f"--backend {name}: expected one of {', '.join(ENGINES)}")
    module, cls_name = ENGINES[name]
    cls = getattr(importlib.import_module(module), cls_name)
    accepted = set(inspect.signature(cls).parameters) - {"model", "tokenizer", "adapters"}
    given = {k: v for k, v in options.items() if v is not None}
    for key in given:
        if key not in accepted:
            other = [n for n in ENGINES if n != name]
            raise InputError(
                f"{_flag(key)}: not an option of the {name} backend (engine options: "
                f"{', '.join(_flag(k) for k in sorted(accepted))}; {_flag(key)} is for "
                f"{' or '.join(other)})"
            )
    return cls(model, tokenizer=tokenizer, adapters=tuple(adapters), **given)


class SharedEngine:
    """One engine for many evaluations: built on first use, then reused for the base model and
    every adapter (``scd run`` loads a model once, not once per evaluation stage)."""

    def __init__(
        self, backend: str, model: str, *, adapters: Sequence[str] = (), **options: Any
    ) -> None:
        self.backend, self.model = backend, model
        self.adapters, self.options = tuple(adapters), options
        self.engine: Engine | None = None
        self.loads = 0  # how many times a model was loaded (benchmarks read it)

    def get(self, tokenizer: Any, adapter: str | None) -> Engine:
        """The engine, built on the first call, switched to ``adapter`` (None: the base)."""
        if self.engine is None:
            self.engine = make_engine(
                self.backend, self.model, tokenizer=tokenizer, adapters=self.adapters,
                **self.options,
            )  # fmt: skip
            self.loads += 1
        self.engine.use_adapter(adapter)
        return self.engine

    def close(self) -> None:
        """Free the engine (a later :meth:`get` builds it again)."""
        if self.engine is not None:
            self.engine.close()
            self.engine = None
