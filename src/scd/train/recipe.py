"""Training recipes: a validated schema, read from YAML, overridden from the command line.

A recipe is data (``recipes/**/*.yaml``); its defaults reproduce the SCD paper's public code:
LoRA r=64, alpha=16, dropout=0.1; 1 epoch; batch 6 x grad-accum 2; lr 3e-4 constant;
max_grad_norm 0.3; gradient checkpointing; paged AdamW 32-bit (CUDA); bf16; seed 42; 10k train /
5k eval rows per contact type; 10% general-instruction mix. The paper also set 3% warmup, which
transformers' ``constant`` schedule ignores: the default here is 0, so that a recipe says what
runs (``constant_with_warmup`` warms up).

Unknown keys and wrong types fail with one line naming the key and the file.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from scd.errors import InputError
from scd.eval.engines.vllm import LORA_RANKS
from scd.options import (
    SEED,
    Denominator,
    EngineSpec,
    SFTOptions,
    above_zero,
    fraction,
    non_negative,
    one_of,
    option,
    positive,
)
from scd.train.recipe_checks import recipe_problems

__all__ = [
    "VLLM_LORA_RANKS",
    "BBQEvalSpec",
    "BiasEvalSpec",
    "DataSpec",
    "EvalSpec",
    "LoraSpec",
    "Recipe",
    "ResourcesSpec",
    "RunSpec",
    "StigmaEvalSpec",
    "ToyModelSpec",
    "TrainSpec",
    "WandbSpec",
    "apply_overrides",
    "load_recipe",
    "recipe_from_dict",
    "recipe_to_dict",
    "recipe_warnings",
]

VLLM_LORA_RANKS = LORA_RANKS  # ranks vLLM can serve (its max_lora_rank choices)


@dataclass
class DataSpec(SFTOptions):
    """Where the SFT data comes from: a ready SFT dir, a prompt dir, or descriptors to generate;
    and how it is built (:class:`~scd.options.SFTOptions`, shared with ``scd generate sft``)."""

    sft: str | None = None  # a directory from `scd generate sft`
    prompts: str | None = None  # a directory from `scd generate contact`
    descriptors: str | None = None  # generate prompts: holistic_bias | stigma | toy | PATH
    hb_version: str = "v1.0"
    eval_prompts: str | None = None  # a source-split setting (2): the stigma prompt dir
    eval_descriptors: str | None = "stigma"  # a source-split setting when generating on the fly
    setting: int = 1


@dataclass
class LoraSpec:
    """PEFT LoraConfig: plain adapters (no DoRA, bias or modules_to_save) that vLLM can serve."""

    r: int = 64
    alpha: int = option(16, check=positive)
    dropout: float = option(0.1, check=fraction)
    target_modules: str | list[str] = "all-linear"


@dataclass
class TrainSpec:
    """TRL SFTConfig settings (names follow SFTConfig where they coincide)."""

    epochs: float = 1.0
    max_steps: int = -1
    batch_size: int = option(6, check=positive)
    grad_accum: int = option(2, check=positive)
    learning_rate: float = option(3e-4, check=above_zero)
    lr_scheduler: str = "constant"
    warmup_ratio: float = option(0.0, check=fraction)  # the paper's 0.03: no effect (constant)
    max_grad_norm: float = option(0.3, check=above_zero)
    weight_decay: float = option(0.0, check=non_negative)
    gradient_checkpointing: bool = True
    optim: str = "paged_adamw_32bit"  # on CUDA; CPU runs use adamw_torch
    bf16: bool = True  # on CUDA; CPU runs train in float32
    seed: int = SEED
    max_length: int = option(512, check=positive)
    packing: bool = False
    padding_free: bool = False
    logging_steps: int = option(10, check=positive)
    save_steps: int = option(500, check=positive)
    save_total_limit: int = option(2, check=positive)
    eval_steps: int | None = option(None, check=positive)
    device: Literal["auto", "cpu", "cuda"] = "auto"


@dataclass
class WandbSpec:
    """Weights & Biases tracking; offline automatically without a key or network."""

    enabled: bool = True
    project: str = "scd"
    entity: str | None = None
    run_name: str | None = None
    group: str | None = None
    log_adapter: bool = False


@dataclass
class ToyModelSpec:
    """``model: toy``: the planted-bias toy model that ``scd run`` builds (and caches)."""

    bias_axes: list[str] = field(default_factory=lambda: ["religion", "nationality"])
    seed: int = 0


@dataclass
class BiasEvalSpec:
    """Bias % on the contact prompts: the base model on the whole prompt set (Tables 1, 3-5),
    each tuned model on its setting's held-out part (Tables 10-14)."""

    enabled: bool = True
    limit: int | None = option(None, check=positive)  # a stratified subset of ~N prompts (base)
    denominator: Denominator = "all"


@dataclass
class BBQEvalSpec:
    """BBQ accuracy and bias scores (Table 15), base and tuned."""

    enabled: bool = False
    data: str | None = None  # a directory of <Category>.jsonl (nyu-mll/BBQ data/) or a Hub id
    categories: list[str] | None = None
    limit: int | None = option(None, check=positive)  # a stratified subset of ~N items


@dataclass
class StigmaEvalSpec:
    """Stigma probes on causal LLMs (``scd eval stigma``), base and tuned."""

    probes: list[Literal["sds", "aq27"]] = field(default_factory=list)
    limit_conditions: int | None = option(None, check=positive)  # the first N conditions only


@dataclass
class EvalSpec(EngineSpec):
    """What ``scd run`` evaluates, and with which engine (the :class:`~scd.options.EngineSpec`
    keys, as ``scd eval``'s flags: backend, dtype, batch_size, ...)."""

    seed: int = 0
    shards: int = option(1, check=positive)  # the base bias evaluation in N slices (Ray tasks)
    bias: BiasEvalSpec = field(default_factory=BiasEvalSpec)
    bbq: BBQEvalSpec = field(default_factory=BBQEvalSpec)
    stigma: StigmaEvalSpec = field(default_factory=StigmaEvalSpec)

    def engine(self) -> EngineSpec:
        """The engine part of the section."""
        return EngineSpec(**{f.name: getattr(self, f.name) for f in dataclasses.fields(EngineSpec)})


@dataclass
class ResourcesSpec:
    """What each task of ``scd run --launcher ray`` asks Ray for (Ray's own task options)."""

    num_cpus: float = option(1.0, check=non_negative)
    num_gpus: float = option(0.0, check=non_negative)  # > 1: training runs under torchrun
    max_retries: int = option(3, check=non_negative)  # Ray's default: a crashed worker reruns


@dataclass
class RunSpec:
    """``scd run``: the run's name (its directory), the settings it sweeps, and what each
    setting's task asks for under ``--launcher ray``."""

    name: str | None = None  # default: the recipe file's name
    settings: list[int] | None = None  # default: [data.setting]; a sweep trains one per setting
    resources: ResourcesSpec = field(default_factory=ResourcesSpec)


@dataclass
class Recipe:
    """One training run (``scd train``), or a whole pipeline (``scd run``)."""

    model: str  # a local directory, a Hub id, or "toy" (scd run builds the planted-bias model)
    output_dir: str | None = None  # scd train writes here; scd run uses outputs/<run_id>/
    data: DataSpec = field(default_factory=DataSpec)
    lora: LoraSpec = field(default_factory=LoraSpec)
    quantization: Literal["none", "4bit"] = "none"  # 4bit: bitsandbytes NF4 QLoRA
    train: TrainSpec = field(default_factory=TrainSpec)
    wandb: WandbSpec = field(default_factory=WandbSpec)
    toy_model: ToyModelSpec = field(default_factory=ToyModelSpec)
    eval: EvalSpec = field(default_factory=EvalSpec)
    run: RunSpec = field(default_factory=RunSpec)


def _type_name(tp: Any) -> str:
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(
        tp, getattr(tp, "__name__", str(tp))
    )


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Check ``value`` against a field type; ints are accepted for floats."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        errors = []
        for arg in typing.get_args(tp):
            if arg is type(None):
                if value is None:
                    return None
                continue
            try:
                return _coerce(value, arg, where)
            except InputError as err:
                errors.append(str(err))
        raise InputError(errors[0] if errors else f"{where}: wrong type")
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            expected = one_of([str(a) for a in allowed])
            raise InputError(f"{where}: expected {expected}, got {value!r}")
        return value
    if origin is list:
        (item,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise InputError(f"{where}: expected a list, got {value!r}")
        return [_coerce(v, item, where) for v in value]
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, str):  # YAML 1.1 reads 3e-4 (no dot) as a string
        try:
            return float(value)
        except ValueError:
            pass
    if tp in (int, float) and isinstance(value, bool):
        raise InputError(f"{where}: expected {_type_name(tp)}, got {value!r}")
    if isinstance(tp, type) and not isinstance(value, tp):
        raise InputError(f"{where}: expected {_type_name(tp)}, got {value!r}")
    return value


def _build(cls: type, data: Any, where: str, source: str, problems: list[str]) -> Any:
    """``cls`` from ``data``; each unknown key, wrong type or missing key is added to
    ``problems`` (a bad value leaves its default), so that all are reported at once."""
    if not isinstance(data, dict):
        problems.append(f"{source}: {where or 'the recipe'} must be a mapping")
        return cls() if cls is not Recipe else None
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for name, value in data.items():
        key = f"{where}.{name}" if where else name
        if name not in fields:
            problems.append(f"{source}: unknown key '{key}' (expected one of {', '.join(fields)})")
        elif dataclasses.is_dataclass(hints[name]):
            kwargs[name] = _build(hints[name], value, key, source, problems)
        else:
            try:
                kwargs[name] = _coerce(value, hints[name], f"{source}: {key}")
            except InputError as err:
                problems.append(str(err))
    for name, f in fields.items():
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required and name not in kwargs and name not in data:
            key = f"{where}.{name}" if where else name
            problems.append(f"{source}: missing required key '{key}'")
    try:
        return cls(**kwargs)
    except TypeError:  # a required key is missing or bad: nothing to check further
        return None


def _recipe(data: Any, source: str) -> Recipe:
    """Build and check a recipe: every problem at once, one line each naming file and key."""
    problems: list[str] = []
    recipe = _build(Recipe, data, "", source, problems)
    if recipe is not None:
        problems += recipe_problems(recipe, source)
    if problems:
        sections = [f.name for f in dataclasses.fields(Recipe)]
        rank = {p: _section_rank(p[len(source) + 2 :], sections) for p in problems}
        raise InputError("\n".join(sorted(dict.fromkeys(problems), key=rank.get)))
    return recipe


def _section_rank(problem: str, sections: list[str]) -> int:
    """Where a problem's key is in the recipe (unknown or missing keys and settings last)."""
    section = problem.split(":", 1)[0].split(".", 1)[0]
    return sections.index(section) if section in sections else len(sections)


def apply_overrides(data: dict[str, Any], overrides: list[str], source: str) -> dict[str, Any]:
    """Apply ``key.sub=value`` overrides (values parsed as YAML) to a recipe mapping."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise InputError(
                "expected key=value (e.g. train.learning_rate=1e-4)", key="set", value=item
            )
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError:
            value = raw
        node = data
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise InputError(f"'{part}' is not a section of {source}", key="set", value=item)
        node[parts[-1]] = value
    return data


def load_recipe(path: Path | str, overrides: list[str] | None = None) -> Recipe:
    """Read, override and validate a recipe file.

    Raises:
        InputError: unreadable YAML, unknown keys, wrong types or inconsistent settings.
    """
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: recipe not found") from None
    except IsADirectoryError:
        raise InputError(f"{path}: a directory, not a recipe file") from None
    except UnicodeDecodeError as err:
        raise InputError(
            f"{path}: not UTF-8 text (byte {err.start}); a YAML recipe is expected"
        ) from None
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror or err})") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" (line {mark.line + 1})" if mark else ""
        raise InputError(f"{path}: not valid YAML{line}") from None
    data = apply_overrides(data if isinstance(data, dict) else {}, overrides or [], str(path))
    return _recipe(data, str(path))


def recipe_from_dict(data: dict[str, Any], source: str = "recipe") -> Recipe:
    """Validate a recipe given as a mapping (``source`` names it in errors)."""
    return _recipe(data, source)


def recipe_warnings(recipe: Recipe) -> list[str]:
    """What a valid recipe does that its reader may not expect (printed, not refused)."""
    t, warnings = recipe.train, []
    if t.lr_scheduler == "constant" and t.warmup_ratio > 0:
        warnings.append(
            f"train.lr_scheduler constant ignores train.warmup_ratio {t.warmup_ratio} "
            "(transformers' constant schedule has no warmup; the SCD paper's code ran it so); "
            "use constant_with_warmup to warm up"
        )
    return warnings


def recipe_to_dict(recipe: Recipe) -> dict[str, Any]:
    """The resolved recipe as plain data (for the output dir and W&B config)."""
    return dataclasses.asdict(recipe)
