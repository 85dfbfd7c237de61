"""A recipe's ``data:`` section: where a run's SFT data comes from (:class:`DataSpec`) and how a
setting's SFT rows are built (:class:`SFTOptions`, shared with ``scd generate sft``); and
:data:`SEED`, the paper's seed. Part of the recipe schema (:mod:`scd.config.schema`)."""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Literal

from scd.config.options import Options, fraction, option, positive

__all__ = ["SEED", "STYLES", "DataSpec", "SFTOptions"]

SEED = 42  # the paper's seed: training, the train/eval split and the SFT sampling
Style = Literal["short", "explained"]  # an SFT completion: the answer, or it and one sentence
STYLES = typing.get_args(Style)


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
        None,
        "general instruction data: local json/jsonl/parquet or Hub id (e.g. yahma/alpaca-cleaned)",
    )
    general_fraction: float = option(0.0, "share of train rows (paper: 0.1)", check=fraction)
    seed: int = option(SEED, "seed of the split and the sampling")


@dataclass
class DataSpec(SFTOptions):
    """Where the SFT data comes from: a ready SFT dir, a prompt dir, or descriptors to generate;
    and how it is built (:class:`SFTOptions`, shared with ``scd generate sft``)."""

    sft: str | None = option(None, "a directory from `scd generate sft`")
    prompts: str | None = option(None, "a directory from `scd generate contact`")
    descriptors: str | None = option(
        None, "descriptors to generate prompts from: holistic_bias | stigma | toy | PATH"
    )
    hb_version: str = option("v1.0", "the HolisticBias release (its descriptors.json)")
    eval_prompts: str | None = option(
        None, "a source-split setting (2): the stigma prompt directory"
    )
    eval_descriptors: str | None = option(
        "stigma", "a source-split setting when generating on the fly: its evaluation descriptors"
    )
    setting: int = option(
        1, "the transfer setting (1-8, the paper's Table 2): which prompts train and which evaluate"
    )
