"""Options defined once: each is a dataclass field with its type (``Literal`` for a closed set),
default, help and check. The command line (``scd.cli``: :func:`add_options`) and the recipe
schema (``scd.train.recipe``: its sections inherit these classes) are generated from them, and
:func:`field_problems` checks a value the same way for both.

- :class:`EngineSpec`: how a model is run (backend, dtype, batch size, device, parallelism,
  context, system prompt) -- one value that goes into ``run.json``, every cache key and the engine.
- :class:`SFTOptions`: how a setting's instruction-tuning data is built.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

__all__ = [
    "BACKENDS", "DENOMINATORS", "DTYPES", "EVAL_BATCH_SIZE", "MODES", "SEED", "STYLES",
    "EngineSpec", "Options",
    "SFTOptions", "above_zero", "add_options", "argument_type", "device_name", "field_problems",
    "fraction", "literal_values", "non_negative", "one_of", "option", "positive", "share",
]  # fmt: skip

Backend = Literal["hf", "vllm"]  # inference engines, see scd.eval.engines
Dtype = Literal["auto", "float32", "bfloat16", "float16"]  # auto: bfloat16 on CUDA, else float32
Mode = Literal["choice", "generate"]  # a bias prompt: its most probable option, or text parsed
Denominator = Literal["all", "parsed"]  # bias %: over all prompts (the paper) or the parsed ones
Style = Literal["short", "explained"]  # an SFT completion: the answer, or it and one sentence
BACKENDS, DTYPES = typing.get_args(Backend), typing.get_args(Dtype)
MODES, DENOMINATORS = typing.get_args(Mode), typing.get_args(Denominator)
STYLES = typing.get_args(Style)
EVAL_BATCH_SIZE = 32  # hf engine and the stigma pipelines: prompts per forward pass
SEED = 42  # the paper's seed: training, the train/eval split and the SFT sampling

Check = Callable[[Any], "str | None"]  # a value -> what is wrong with it, or None


def one_of(values: Sequence[str]) -> str:
    """``a, b or c``: the allowed values, for an error message."""
    return ", ".join(values[:-1]) + " or " + values[-1] if len(values) > 1 else values[0]


def positive(value: Any) -> str | None:
    return None if value >= 1 else "expected a positive number"


def above_zero(value: Any) -> str | None:
    return None if value > 0 else "expected a number > 0"


def non_negative(value: Any) -> str | None:
    return None if value >= 0 else "expected >= 0"


def fraction(value: Any) -> str | None:
    return None if 0 <= value < 1 else "expected 0 <= f < 1"


def share(value: Any) -> str | None:
    return None if 0 < value <= 1 else "expected 0 < f <= 1"


def device_name(value: Any) -> str | None:
    ok = re.fullmatch(r"cpu|mps|cuda(:\d+)?", value)
    return None if ok else "expected cpu, cuda, cuda:N or mps"


def option(
    default: Any = None, help: str = "", *, check: Check | None = None, backend: str | None = None
) -> Any:
    """A dataclass field that is an option: ``help`` for ``--help``, ``check`` for its value
    (None passes), ``backend`` when only one engine takes it."""
    return field(default=default, metadata={"help": help, "check": check, "backend": backend})


_O = TypeVar("_O", bound="Options")


class Options:
    """A dataclass of options that checks its own values."""

    def problems(self) -> Iterator[tuple[str, str]]:
        """``(field, what is wrong)`` for each bad value."""
        return field_problems(self)

    def check(self: _O) -> _O:
        """``self``, if every option is good.

        Raises:
            InputError: the first bad option, naming its key and value.
        """
        from scd.errors import InputError

        for key, problem in self.problems():
            raise InputError(problem, key=key, value=getattr(self, key))
        return self


@dataclass
class EngineSpec(Options):
    """How a model is run. ``None``: the engine's default. The fields that change a result
    (:meth:`identity`) are pinned in ``run.json`` and in every cache key; the rest change speed
    and memory only, and are recorded in the summary."""

    backend: Backend = option("hf", "hf: transformers (CPU or GPU); vllm: vLLM (CUDA GPUs)")
    dtype: Dtype = option("auto", "weights' dtype; auto: bfloat16 on CUDA, float32 on CPU")
    batch_size: int | None = option(
        None, f"prompts per forward (default: {EVAL_BATCH_SIZE})", check=positive, backend="hf"
    )
    device: str | None = option(
        None, "cpu, cuda, cuda:1 (default: cuda if available)", check=device_name, backend="hf"
    )
    tensor_parallel_size: int | None = option(
        None, "GPUs per model (default: 1)", check=positive, backend="vllm"
    )
    max_model_len: int | None = option(
        None, "context to reserve KV cache for (default: the model's, at most 4096)",
        check=positive, backend="vllm",
    )  # fmt: skip
    gpu_memory_utilization: float | None = option(
        None, "share of GPU memory vLLM may take (default: 0.9)", check=share, backend="vllm"
    )
    system_prompt: str | None = option(None, "system message put before every prompt")

    def identity(self) -> dict[str, Any]:
        """The fields that change what a model answers: pinned and in cache keys."""
        return {"backend": self.backend, "dtype": self.dtype, "system_prompt": self.system_prompt}

    def cache_identity(self) -> dict[str, Any]:
        """:meth:`identity` with the hf backend's ``auto`` dtype resolved to the one it means on
        this machine, for keys of a cache that CPU and GPU machines may share."""
        found = self.identity()
        if self.dtype == "auto" and self.backend == "hf":
            import torch

            device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
            found["dtype"] = "bfloat16" if device.startswith("cuda") else "float32"
        return found

    def engine_options(self) -> dict[str, Any]:
        """The options the engine's constructor takes: this backend's, those that are set."""
        shared = ("dtype",)
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(EngineSpec)
            if getattr(self, f.name) is not None
            and (f.name in shared or f.metadata.get("backend") == self.backend)
        }

    def problems(self) -> Iterator[tuple[str, str]]:
        """``(field, what is wrong)`` for each bad value, an option of the other backend
        included (so a typo'd or misplaced option is never ignored)."""
        yield from field_problems(self, EngineSpec)
        for f in dataclasses.fields(EngineSpec):
            owner = f.metadata.get("backend")
            if owner and owner != self.backend and getattr(self, f.name) is not None:
                yield f.name, f"an option of the {owner} backend, not of {self.backend}"


@dataclass
class SFTOptions(Options):
    """How a setting's SFT rows are built (``scd generate sft`` and a recipe's ``data``)."""

    settings_file: str | None = option(None, "settings YAML (default: packaged Table 9)")
    style: Style = option(
        "short", "completion: the answer alone, or the answer and one neutral sentence"
    )
    max_train: int = option(10000, "train rows per contact type", check=positive)
    max_eval: int = option(5000, "eval rows per contact type", check=positive)
    general: str | None = option(
        None, "general instruction data: local json/jsonl/parquet or Hub id (e.g. "
        "yahma/alpaca-cleaned)"
    )  # fmt: skip
    general_fraction: float = option(0.0, "share of train rows (paper: 0.1)", check=fraction)
    seed: int = option(SEED, "seed of the split and the sampling")


def literal_values(tp: Any) -> tuple[Any, ...] | None:
    """The allowed values of a ``Literal`` type (or ``Literal | None``), else None."""
    if typing.get_origin(tp) is Literal:
        return typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            if typing.get_origin(arg) is Literal:
                return typing.get_args(arg)
    return None


def field_problems(obj: Any, cls: type | None = None) -> Iterator[tuple[str, str]]:
    """``(field, what is wrong)`` for each field of ``obj`` (of ``cls``'s fields) whose value
    is not one of its ``Literal`` values or fails its ``check``; None passes a check."""
    hints = typing.get_type_hints(cls or type(obj))
    for f in dataclasses.fields(cls or obj):
        check, value = f.metadata.get("check"), getattr(obj, f.name)
        allowed = literal_values(hints[f.name])
        if allowed and value not in allowed and not (value is None and _optional(hints[f.name])):
            yield f.name, f"expected {one_of([str(a) for a in allowed])}, got {value}"
        elif check and value is not None and (problem := check(value)):
            yield f.name, f"{problem}, got {value}"


def _optional(tp: Any) -> bool:
    return type(None) in typing.get_args(tp)


def argument_type(base: type, check: Check | None) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = base(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {_NAMES[base]}, got {text!r}") from None
        problem = check(value) if check else None
        if problem:
            raise argparse.ArgumentTypeError(f"{problem}, got {value!r}")
        return value

    parse.__name__ = _NAMES[base]  # argparse names the type in its own errors
    return parse


_NAMES = {int: "an integer", float: "a number", str: "a string"}


def add_options(
    parser: argparse.ArgumentParser, cls: type, names: Sequence[str] | None = None
) -> None:
    """Add ``--flag`` for each field of ``cls`` (or those in ``names``): type, choices, default,
    help and check from the field; a backend's own option says so in its help."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if names is not None and f.name not in names:
            continue
        meta, tp = f.metadata, hints[f.name]
        owner = meta.get("backend")
        kwargs: dict[str, Any] = {
            "default": f.default,
            "help": f"{owner}: {meta['help']}" if owner else meta["help"],
        }
        choices = literal_values(tp)
        if choices:
            kwargs["choices"] = choices
        else:
            base = next(t for t in (int, float, str) if t in (tp, *typing.get_args(tp)))
            kwargs["type"] = argument_type(base, meta.get("check"))
        parser.add_argument("--" + f.name.replace("_", "-"), **kwargs)
