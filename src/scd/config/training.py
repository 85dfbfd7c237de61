"""A recipe's training sections: ``lora:`` (:class:`LoraSpec`, PEFT's ``LoraConfig``) and
``train:`` (:class:`TrainSpec`: TRL's ``SFTConfig`` keys by its own names, scd's own, and any
other field of TRL's config), and the keys of TRL's config that scd sets itself
(:data:`TRL_DECIDED`). Part of the recipe schema (:mod:`scd.config.schema`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from scd.config.options import above_zero, fraction, non_negative, option, positive
from scd.config.sft_data import SEED

__all__ = ["TRL_DECIDED", "LoraSpec", "TrainSpec"]


@dataclass
class LoraSpec:
    """PEFT LoraConfig: plain adapters (no DoRA, bias or modules_to_save) that vLLM can serve."""

    r: int = 64
    alpha: int = option(16, check=positive)
    dropout: float = option(0.1, check=fraction)
    target_modules: str | list[str] = "all-linear"


# TRL config fields scd sets itself (train.setup.trl_config; the Hub token: HF_TOKEN, never a
# recipe) -- and each method those it decides (scd.config.arms.method_decided: beta ...); a
# recipe may not set them
TRL_DECIDED = (
    "hub_token",
    "output_dir",
    "report_to",
    "run_name",
    "project",
    "use_cpu",
    "fp16",
    "data_seed",
    "save_strategy",
    "eval_strategy",
    "include_num_input_tokens_seen",
    "dataloader_num_workers",
    "disable_tqdm",
)


@dataclass
class TrainSpec:
    """TRL ``SFTConfig`` keys, by its own names; scd's own: ``device`` (where training runs),
    ``eval_every_steps``, ``eval_prompts``, ``select`` and ``max_kl``
    (:mod:`scd.train.bias_steps`); ``trl``: every other key of the section, a field of TRL's
    config (:func:`scd.config.values.library_fields`). ``push_to_hub``, ``hub_model_id`` and
    ``hub_private_repo``
    keep TRL's names, but scd uploads the adapter it kept, with a model card
    (:mod:`scd.report.model_card`), instead of the trainer's checkpoint folder."""

    num_train_epochs: float = option(1.0, check=above_zero)
    max_steps: int = option(-1, "> 0: overrides the epochs")
    per_device_train_batch_size: int = option(6, check=positive)
    per_device_eval_batch_size: int | None = option(None, "default: train's", check=positive)
    gradient_accumulation_steps: int = option(2, check=positive)
    learning_rate: float = option(3e-4, check=above_zero)
    lr_scheduler_type: str = "constant"
    warmup_steps: float = option(0.0, "< 1: a ratio of the steps", check=non_negative)
    max_grad_norm: float = option(0.3, check=above_zero)
    weight_decay: float = option(0.0, check=non_negative)
    gradient_checkpointing: bool = True
    optim: str = option("paged_adamw_32bit", "on CUDA; CPU runs use adamw_torch")
    bf16: bool = option(True, "on CUDA; CPU runs train in float32")
    seed: int = SEED
    max_length: int = option(512, check=positive)
    packing: bool = option(
        False, "TRL's BFD packing: rows of max_length tokens (more rows per step, fewer steps)"
    )
    padding_free: bool = option(
        False,
        "a batch as one sequence without pad tokens (sft): the same rows, steps and losses as "
        "padded; on a CPU slower (BENCHMARKS.md)",
        speed=True,  # the same training either way: a run resumes with the other
    )
    logging_steps: int = option(10, check=positive)
    save_steps: int = option(500, check=positive)
    save_total_limit: int = option(2, check=positive)
    eval_steps: int | None = option(None, check=positive)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    eval_every_steps: int = option(
        0,
        "scd's: every N steps, the bias of the model being trained on validation prompts "
        "(0: never)",
        check=non_negative,
    )
    eval_prompts: int = option(
        60, "scd's: about how many validation descriptor prompts (whole sets)", check=positive
    )
    select: Literal["last", "best"] = option(
        "last",
        "scd's: the adapter kept: the last step's, or the measured step with the lowest "
        "validation bias whose KL from the base model stays within max_kl",
    )
    max_kl: float | None = option(
        None,
        "scd's: with select best, the largest KL from the base model on neutral prompts "
        "(nats/token) a kept step may have (none: no bound)",
        check=non_negative,
    )
    select_judgment: bool = option(
        False,
        "scd's: with select best, keep only a measured step that passes the arena's judgment "
        "gate on the relevance controls of the training templates (evaluation cues, the "
        "setting's training side; never the judgment's held-out templates) against the same "
        "model with its adapter off",
    )
    push_to_hub: bool = option(
        False,
        "upload the adapter with its model card to hub_model_id (scd train: once trained; "
        "scd run: once evaluated, the card with its before/after tables); needs a Hub token",
        speed=True,
    )
    hub_model_id: str | None = option(
        None,
        "the Hub repository (owner/name) of push_to_hub; scd run with more than one adapter "
        "adds -setting-<n> (and -<arm>) to it",
        speed=True,
    )
    hub_private_repo: bool | None = option(
        None, "create the repository private (none: the Hub's default)", speed=True
    )
    trl: dict[str, Any] = option(
        None,
        "any other field of TRL's SFTConfig (DPOConfig, KTOConfig for those trainers) by its "
        "own name, checked against TRL's own types; scd sets "
        + ", ".join(TRL_DECIDED)
        + " and what each method decides (beta: arena.beta)",
        factory=dict,
        spread=True,
        flag=False,
    )
