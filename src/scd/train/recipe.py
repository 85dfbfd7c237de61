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
from typing import Any

import yaml

from scd.errors import InputError
from scd.eval.engines.vllm import LORA_RANKS
from scd.options import SEED
from scd.train.recipe_checks import recipe_problems

__all__ = [
    "VLLM_LORA_RANKS",
    "BBQEvalSpec",
    "BiasEvalSpec",
    "DataSpec",
    "EvalSpec",
    "LoraSpec",
    "Recipe",
    "RunSpec",
    "StigmaEvalSpec",
    "ToyModelSpec",
    "TrainSpec",
    "WandbSpec",
    "apply_overrides",
    "engine_options",
    "load_recipe",
    "recipe_from_dict",
    "recipe_to_dict",
    "recipe_warnings",
]

VLLM_LORA_RANKS = LORA_RANKS  # ranks vLLM can serve (its max_lora_rank choices)


@dataclass
class DataSpec:
    """Where the SFT data comes from: a ready SFT dir, a prompt dir, or descriptors to generate."""

    sft: str | None = None  # a directory from `scd generate sft`
    prompts: str | None = None  # a directory from `scd generate contact`
    descriptors: str | None = None  # generate prompts: holistic_bias | stigma | toy | PATH
    hb_version: str = "v1.0"
    eval_prompts: str | None = None  # a source-split setting (2): the stigma prompt dir
    eval_descriptors: str | None = "stigma"  # a source-split setting when generating on the fly
    setting: int = 1
    settings_file: str | None = None  # settings YAML (default: the packaged Table 9)
    style: str = "short"
    max_train: int = 10000
    max_eval: int = 5000
    general: str | None = None  # e.g. yahma/alpaca-cleaned (the paper mixed 10%)
    general_fraction: float = 0.0
    seed: int = SEED


@dataclass
class LoraSpec:
    """PEFT LoraConfig: plain adapters (no DoRA, bias or modules_to_save) that vLLM can serve."""

    r: int = 64
    alpha: int = 16
    dropout: float = 0.1
    target_modules: str | list[str] = "all-linear"


@dataclass
class TrainSpec:
    """TRL SFTConfig settings (names follow SFTConfig where they coincide)."""

    epochs: float = 1.0
    max_steps: int = -1
    batch_size: int = 6
    grad_accum: int = 2
    learning_rate: float = 3e-4
    lr_scheduler: str = "constant"
    warmup_ratio: float = 0.0  # the paper's 0.03 had no effect under its constant schedule
    max_grad_norm: float = 0.3
    weight_decay: float = 0.0
    gradient_checkpointing: bool = True
    optim: str = "paged_adamw_32bit"  # on CUDA; CPU runs use adamw_torch
    bf16: bool = True  # on CUDA; CPU runs train in float32
    seed: int = SEED
    max_length: int = 512
    packing: bool = False
    padding_free: bool = False
    logging_steps: int = 10
    save_steps: int = 500
    save_total_limit: int = 2
    eval_steps: int | None = None
    device: str = "auto"  # auto | cpu | cuda


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
    limit: int | None = None  # a stratified subset of ~N prompts for the base model
    denominator: str = "all"


@dataclass
class BBQEvalSpec:
    """BBQ accuracy and bias scores (Table 15), base and tuned."""

    enabled: bool = False
    data: str | None = None  # a directory of <Category>.jsonl (nyu-mll/BBQ data/) or a Hub id
    categories: list[str] | None = None
    limit: int | None = None  # a stratified subset of ~N items


@dataclass
class StigmaEvalSpec:
    """Stigma probes on causal LLMs (``scd eval stigma``), base and tuned."""

    probes: list[str] = field(default_factory=list)  # sds, aq27
    limit_conditions: int | None = None  # generate the probes for the first N conditions only


@dataclass
class EvalSpec:
    """What ``scd run`` evaluates, and with which engine."""

    backend: str = "hf"  # hf | vllm
    dtype: str = "auto"
    batch_size: int | None = None  # hf: prompts per forward (default 32)
    device: str | None = None  # hf: cpu, cuda, cuda:1 (default: cuda if available)
    tensor_parallel_size: int | None = None  # vllm: GPUs per model (default 1)
    max_model_len: int | None = None  # vllm: default the model's context, at most 4096
    gpu_memory_utilization: float | None = None  # vllm: default 0.9
    system_prompt: str | None = None
    seed: int = 0
    bias: BiasEvalSpec = field(default_factory=BiasEvalSpec)
    bbq: BBQEvalSpec = field(default_factory=BBQEvalSpec)
    stigma: StigmaEvalSpec = field(default_factory=StigmaEvalSpec)


@dataclass
class RunSpec:
    """``scd run``: the run's name (its directory) and the settings it sweeps."""

    name: str | None = None  # default: the recipe file's name
    settings: list[int] | None = None  # default: [data.setting]; a sweep trains one per setting


@dataclass
class Recipe:
    """One training run (``scd train``), or a whole pipeline (``scd run``)."""

    model: str  # a local directory, a Hub id, or "toy" (scd run builds the planted-bias model)
    output_dir: str | None = None  # scd train writes here; scd run uses outputs/<run_id>/
    data: DataSpec = field(default_factory=DataSpec)
    lora: LoraSpec = field(default_factory=LoraSpec)
    quantization: str = "none"  # none | 4bit (bitsandbytes NF4 QLoRA)
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


def _build(cls: type, data: Any, where: str, source: str) -> Any:
    if not isinstance(data, dict):
        raise InputError(f"{source}: {where or 'the recipe'} must be a mapping")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        key = f"{where}.{unknown[0]}" if where else unknown[0]
        raise InputError(f"{source}: unknown key '{key}' (expected one of {', '.join(fields)})")
    kwargs = {}
    for name, value in data.items():
        key = f"{where}.{name}" if where else name
        tp = hints[name]
        if dataclasses.is_dataclass(tp):
            kwargs[name] = _build(tp, value, key, source)
        else:
            kwargs[name] = _coerce(value, tp, f"{source}: {key}")
    missing = [
        n
        for n, f in fields.items()
        if n not in kwargs
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        key = f"{where}.{missing[0]}" if where else missing[0]
        raise InputError(f"{source}: missing required key '{key}'")
    return cls(**kwargs)


def _check(recipe: Recipe, source: str) -> Recipe:
    """Every problem of a well-typed recipe at once: one line each, naming the file and key."""
    problems = recipe_problems(recipe, source)
    if problems:
        raise InputError("\n".join(problems))
    return recipe


def apply_overrides(data: dict[str, Any], overrides: list[str], source: str) -> dict[str, Any]:
    """Apply ``key.sub=value`` overrides (values parsed as YAML) to a recipe mapping."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise InputError(f"--set {item}: expected key=value (e.g. train.learning_rate=1e-4)")
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError:
            value = raw
        node = data
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise InputError(f"--set {item}: '{part}' is not a section of {source}")
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
    return _check(_build(Recipe, data, "", str(path)), str(path))


def recipe_from_dict(data: dict[str, Any], source: str = "recipe") -> Recipe:
    """Validate a recipe given as a mapping (``source`` names it in errors)."""
    return _check(_build(Recipe, data, "", source), source)


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


def engine_options(recipe: Recipe) -> dict[str, Any]:
    """The recipe's engine options for :func:`scd.eval.engines.make_engine` (None: default)."""
    ev = recipe.eval
    names = ("dtype", "batch_size", "device", "tensor_parallel_size", "max_model_len",
             "gpu_memory_utilization")  # fmt: skip
    return {name: getattr(ev, name) for name in names}


def recipe_to_dict(recipe: Recipe) -> dict[str, Any]:
    """The resolved recipe as plain data (for the output dir and W&B config)."""
    return dataclasses.asdict(recipe)
