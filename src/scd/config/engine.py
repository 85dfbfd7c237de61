"""How a model is run: the engines by name (:data:`ENGINES`) and what every engine takes
(:class:`EngineSpec`).

An engine is a class behind :class:`scd.eval.engines.Engine` in a module of its own, with a
``name`` and its options (a subclass of :class:`EngineSpec` declared beside it as the class's
``Options``, which generates the engine's flags and its recipe keys), registered in
:data:`ENGINES` (``ENGINES.register(cls)``: :mod:`scd.eval.engines` registers the built-in ones
when imported). Whether an option changes what a model answers (pinned with a result and in
cache keys) or only speed and memory (recorded) is its field's ``speed`` metadata.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Literal

from scd.config.options import Options, field_problems, one_of, option
from scd.config.registry import Registry

__all__ = [
    "DEFAULT_BACKEND",
    "ENGINES",
    "EVAL_BATCH_SIZE",
    "EngineSpec",
    "engine_class",
    "engine_of",
    "engine_spec",
    "resolve_dtype",
]

ENGINES: Registry[Any] = Registry("backend")  # backend -> engine class (scd.eval.engines fills it)
DEFAULT_BACKEND = "hf"
Dtype = Literal["auto", "float32", "bfloat16", "float16"]
EVAL_BATCH_SIZE = 32  # hf engine and the stigma pipelines: prompts per forward pass


def engine_class(name: str) -> Any:
    """The engine registered as ``name``.

    Raises:
        InputError: no such engine (naming the known ones).
    """
    return ENGINES.named(name)


def engine_spec(backend: str = DEFAULT_BACKEND, **values: Any) -> EngineSpec:
    """The options of engine ``backend`` (:func:`engine_class`) with ``values`` (None: not
    given), unchecked.

    Raises:
        InputError: an unknown engine, or a value that is not one of its options (naming the
            engine whose option it is).
    """
    from scd.errors import InputError

    cls = engine_class(backend).Options
    own = [f.name for f in fields(cls)]
    values = {k: v for k, v in values.items() if k in own or v is not None}  # None: not given
    for key, value in values.items():
        if key not in own:
            owner = engine_of(key)
            text = (
                f"an option of the {owner} backend, not of {backend}"
                if owner
                else f"not an option of the {backend} engine ({', '.join(own[1:])})"
            )
            raise InputError(text, key=key, value=value)
    return cls(backend=backend, **values)


def engine_of(option_name: str) -> str | None:
    """The registered engine whose option ``option_name`` is (the first, if several), if any."""
    ENGINES.require()
    for name in ENGINES:
        if option_name in {f.name for f in fields(engine_class(name).Options)}:
            return name
    return None


def resolve_dtype(dtype: str, device: str | None = None) -> str:
    """What ``auto`` means on a device (default: this machine's): bfloat16 on a CUDA GPU, float32
    elsewhere -- for every engine, so that a result never depends on which engine made it."""
    if dtype != "auto":
        return dtype
    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    return "bfloat16" if device.startswith("cuda") else "float32"


@dataclass
class EngineSpec(Options):
    """What every engine takes; an engine's own options subclass this (its ``Options``). Fields
    without ``speed`` change what a model answers (its :meth:`identity`); the others change speed
    and memory only."""

    backend: str = option(
        DEFAULT_BACKEND,
        "the engine that runs the model, by its registered name: hf (transformers), vllm or "
        "openai (a served model); each takes its own keys besides these",
        flag=False,  # the commands add --backend with the engines that run their models
    )
    dtype: Dtype = option("auto", "weights' dtype; auto: bfloat16 on CUDA, float32 on CPU")
    system_prompt: str | None = option(None, "system message put before every prompt")
    engine_class: ClassVar[type[EngineSpec] | None] = None  # a recipe's eval: its engine's
    max_lora_rank: ClassVar[int | None] = None  # the largest LoRA rank it serves (None: any)

    def cache_identity(self) -> dict[str, Any]:
        """:meth:`~scd.config.options.Options.identity` (the fields that change what a model
        answers; an engine's new speed option changes no earlier result's) with ``auto`` dtype
        resolved to what it means on this machine, for keys of a cache that CPU and GPU
        machines may share."""
        device = getattr(self, "device", None)
        return {**self.identity(), "dtype": resolve_dtype(self.dtype, device)}

    def engine_options(self) -> dict[str, Any]:
        """The options the engine's constructor takes: its own, those that are set."""
        shared = {f.name for f in fields(EngineSpec)} - {"dtype"}
        return {
            f.name: getattr(self, f.name)
            for f in self._fields()
            if f.name not in shared and getattr(self, f.name) is not None
        }

    def to_engine_spec(self) -> EngineSpec:
        """The engine options alone (a recipe's ``eval`` section holds more)."""
        cls = self.engine_class or type(self)
        return cls(**{f.name: getattr(self, f.name) for f in fields(cls)})

    def describe(self, ran: dict[str, Any]) -> str:
        """The engine as a run report names it; ``ran``: what the base evaluation's summary says
        it ran on (``device``, ``dtype``) rather than what "auto" would pick."""
        parts = [self.backend, f"dtype {ran.get('dtype') or self.dtype}", *self.details(ran)]
        if self.system_prompt:
            parts.append(f'system prompt "{self.system_prompt}"')
        return ", ".join(parts)

    def details(self, ran: dict[str, Any]) -> list[str]:
        """What :meth:`describe` says of the engine's own options."""
        return []

    def problems(self) -> Iterator[tuple[str, str]]:
        """``(field, what is wrong)`` for each bad value; options of another engine than
        ``backend`` are refused."""
        if self.backend not in ENGINES:
            yield "backend", f"expected {one_of(list(ENGINES))}, got {self.backend}"
            return
        own, given = engine_class(self.backend).Options, self.engine_class or type(self)
        if not issubclass(given, own):
            yield "backend", f"{given.__name__} given, {self.backend} takes {own.__name__}"
        yield from field_problems(self)

    def _fields(self) -> tuple[Any, ...]:
        """This engine's fields (not the rest of a recipe's ``eval`` section)."""
        return fields(self.engine_class or type(self))
