"""One inference interface, engines chosen by name (:data:`scd.config.engine.ENGINES`).
Adding an engine is a class in a module of its own, with a ``name`` and its options (a
subclass of :class:`~scd.config.engine.EngineSpec`) as ``Options`` beside it, and one
``ENGINES.register(cls)`` call (the built-in ones: the lines at the end of this module,
registered when it is imported); its flags and recipe keys come from those options. Code
above this package looks engines up through it (``ENGINES``, :func:`engine_spec` ...), so that
the built-in ones are registered when it does.

An engine is built as ``Engine(model, spec, tokenizer=..., adapters=...)``, takes token ids
(formatting and tokenization are shared, engine-free code: :mod:`scd.models.formatting`) and
offers

- ``score(requests) -> list[list[float]]``: for each :class:`ChoiceRequest`, the summed
  log-probability of each option's tokens after the prompt (CAPPr-style option scoring);
- ``generate(prompt_ids, max_new_tokens, messages=None) -> list[str]``: greedy continuations,
  decoded (``messages``: the same prompts as conversations, for an engine that takes text);
- ``use_adapter(path)``: the LoRA adapter (unmerged) the next calls go through, ``None`` for
  the base model -- so that one loaded base model serves the base evaluation and every
  adapter of a run (:class:`SharedEngine`);
- ``close()``: free the model (GPU memory) before the process goes on to other work.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from scd.config.engine import ENGINES, EngineSpec, engine_class, engine_of, engine_spec
from scd.errors import InputError

__all__ = [  # ENGINES and its look-ups are scd.config.engine's: importing them here registers
    "ENGINES",
    "engine_class",
    "engine_of",
    "engine_spec",
    "MAX_LOGPROB_TOKEN_IDS",
    "ChoiceRequest",
    "Engine",
    "SharedEngine",
    "make_engine",
    "engines_for",
    "next_token_reads",
    "require_adapter",
    "summed_options",
]

MAX_LOGPROB_TOKEN_IDS = 128  # vLLM's limit on logprob_token_ids (vllm.sampling_params)


@dataclass(frozen=True)
class ChoiceRequest:
    """A prompt's token ids and the token ids of each answer option that may follow it; for an
    engine that takes text (a chat API), also the conversation and the options' texts."""

    prompt_ids: tuple[int, ...]
    option_ids: tuple[tuple[int, ...], ...]
    messages: tuple[tuple[str, str], ...] = ()  # (role, content): Formatter.conversation
    options: tuple[str, ...] = ()


Reads = list[tuple[tuple[int, ...], list[int]]]  # (prefix, the next-token ids to read after it)


def next_token_reads(requests: list[ChoiceRequest]) -> Reads:
    """The next-token reads that score every option of ``requests``: option ``o`` after a
    prompt needs, at each ``i``, the log-probability of ``o[i]`` after prompt + ``o[:i]``. A prefix
    is read once for all the options that share it ("Likely" / "Unlikely" sharing a first token),
    at most :data:`MAX_LOGPROB_TOKEN_IDS` ids per read (vLLM's ``logprob_token_ids``)."""
    wanted: dict[tuple[int, ...], list[int]] = {}
    for r in requests:
        for option in r.option_ids:
            for i, token in enumerate(option):
                tokens = wanted.setdefault(tuple(r.prompt_ids) + tuple(option[:i]), [])
                if token not in tokens:
                    tokens.append(token)
    return [
        (prefix, tokens[lo : lo + MAX_LOGPROB_TOKEN_IDS])
        for prefix, tokens in wanted.items()
        for lo in range(0, len(tokens), MAX_LOGPROB_TOKEN_IDS)
    ]


def summed_options(
    requests: list[ChoiceRequest], reads: Reads, found: list[list[float]]
) -> list[list[float]]:
    """Each request's option log-probabilities: the sums over its tokens of what ``found`` holds
    for each read of :func:`next_token_reads` (one value per id read, in order)."""
    logprob = {
        (prefix, t): v for (prefix, ids), values in zip(reads, found) for t, v in zip(ids, values)
    }
    return [
        [
            sum(logprob[tuple(r.prompt_ids) + tuple(o[:i]), t] for i, t in enumerate(o))
            for o in r.option_ids
        ]
        for r in requests
    ]


class Engine(Protocol):
    """What every engine provides."""

    Options: ClassVar[type[EngineSpec]]  # its options: flags, recipe keys, pinned identity
    name: ClassVar[str]  # its registered name: the recipe's eval.backend, --backend
    model_kinds: ClassVar[tuple[str, ...]]  # the models it runs: causal, masked, classifier
    help: ClassVar[str]  # one line for --help

    def __init__(
        self, model: str, spec: EngineSpec, *, tokenizer: Any = None, adapters: Sequence[str] = ()
    ) -> None: ...

    def score(self, requests: list[ChoiceRequest]) -> list[list[float]]: ...

    def generate(
        self, prompt_ids: list[list[int]], max_new_tokens: int, *, messages: Any = None
    ) -> list[str]: ...

    def use_adapter(self, adapter: str | None) -> None: ...

    def close(self) -> None: ...


def require_adapter(adapter: str | Path | None) -> None:
    """Refuse an ``--adapter`` that is not a PEFT adapter directory."""
    if adapter and not (Path(adapter) / "adapter_config.json").is_file():
        raise InputError(
            "no adapter_config.json (a PEFT adapter dir)", key="adapter", value=adapter
        )


def engines_for(kinds: Sequence[str]) -> dict[str, Any]:
    """The registered engines (name -> class) that run a model of one of ``kinds`` (a
    benchmark's ``model_kinds``)."""
    return {name: cls for name, cls in ENGINES.items() if set(cls.model_kinds) & set(kinds)}


def make_engine(
    spec: EngineSpec, model: str, *, tokenizer: Any = None, adapters: Sequence[str] = ()
) -> Engine:
    """Build the engine ``spec.backend`` (a name in :data:`~scd.config.engine.ENGINES`) for
    ``model`` (a directory or Hub id).

    ``adapters``: every LoRA adapter the engine will be asked to use (vLLM sizes its LoRA
    slots from them).

    Raises:
        InputError: unknown engine name, a bad option or one of the other engine, or the engine
            cannot be used here.
    """
    cls: type[Engine] = engine_class(spec.check().backend)
    return cls(model, spec, tokenizer=tokenizer, adapters=tuple(adapters))


class SharedEngine:
    """One engine for many evaluations: built on first use, then reused for the base model and
    every adapter (``scd run`` loads a model once, not once per evaluation stage)."""

    def __init__(self, spec: EngineSpec, model: str, *, adapters: Sequence[str] = ()) -> None:
        self.spec, self.model, self.adapters = spec, model, tuple(adapters)
        self.engine: Engine | None = None
        self.loads = 0  # how many times a model was loaded (benchmarks read it)

    def get(
        self, tokenizer: Any, adapter: str | None, steer: Any = None, erase: Any = None
    ) -> Engine:
        """The engine, built on the first call, switched to ``adapter`` (None: the base), to
        the steering vector ``steer`` and the eraser ``erase`` (None: none; the hf engine's,
        :mod:`scd.eval.steering`, :mod:`scd.eval.erasure`)."""
        if self.engine is None:
            self.engine = make_engine(
                self.spec, self.model, tokenizer=tokenizer, adapters=self.adapters
            )
            self.loads += 1
        self.engine.use_adapter(adapter)
        if steer is not None or getattr(self.engine, "steering", None) is not None:
            self.engine.use_steering(steer)
        if erase is not None or getattr(self.engine, "erasure", None) is not None:
            self.engine.use_erasure(erase)
        return self.engine

    def close(self) -> None:
        """Free the engine (a later :meth:`get` builds it again)."""
        if self.engine is not None:
            self.engine.close()
            self.engine = None


def _register_builtins() -> None:
    from scd.eval.engines.hf import HFEngine
    from scd.eval.engines.openai import OpenAIEngine
    from scd.eval.engines.vllm import VLLMEngine

    for engine in (HFEngine, VLLMEngine, OpenAIEngine):
        ENGINES.register(engine)


_register_builtins()
