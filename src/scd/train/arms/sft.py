"""SCD's own method, TRL's SFTTrainer on the setting's contact prompts (the loss on the
completion only), and the ``general`` arm: the same trainer on general instructions only, the
control for what any tuning does."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scd.train.arms.base import Arm, Method, Problem, RowsInput
from scd.train.arms.contrast import Contrast

if TYPE_CHECKING:
    from scd.config.schema import Recipe
    from scd.data_gen.contrast import Twin
    from scd.models.formatting import Formatter
    from scd.train.spec import TrainingSpec

__all__ = ["SFT", "General", "SFTContrast"]


class SFT(Method):
    name = "sft"
    help = "LoRA SFT on the setting's contact prompts (SCD)"
    config_class = "trl:SFTConfig"
    trainer_class = "trl:SFTTrainer"
    columns = ("prompt", "completion")
    decided = ("completion_only_loss",)
    check_sample = 256
    padding_free = True

    def config_values(self, spec: TrainingSpec) -> dict[str, Any]:
        return {"completion_only_loss": True}

    def write_method_rows(
        self, inputs: RowsInput, out: Path, arm: str, twins: Sequence[Twin]
    ) -> dict[str, Any]:
        from scd.data_gen.arms import write_sft_rows

        return write_sft_rows(inputs.sft, out, arm, twins, inputs.data.seed)

    def render(self, data: Any, formatter: Formatter) -> Any:
        from scd.train.sft_rows import training_rows

        return training_rows(data.select_columns(list(self.columns)), formatter)

    def check_tokens(
        self, dataset: Any, rows: list[dict[str, Any]], formatter: Formatter, spec: TrainingSpec
    ) -> int:
        from scd.train.sft_rows import check_trained_tokens

        if spec.train.packing:  # packed rows no longer line up with the SFT rows
            return 0
        return check_trained_tokens(dataset, rows, formatter)


class General(Arm):
    name = "general"
    help = "LoRA SFT on general instruction data only (data.general): the control"
    method = "sft"
    own_rows = True

    def problems(self, recipe: Recipe) -> Iterator[Problem]:
        if not recipe.data.general:  # a path that is not a file: scd.config.checks
            yield (
                "data.general",
                "data.general: the general arm trains on general instruction data "
                "only: give a JSONL/Parquet file of prompt/response rows or a Hub "
                "dataset id",
            )

    def write_rows(self, inputs: RowsInput, out: Path) -> dict[str, Any]:
        from scd.data_gen.arms import write_general_rows

        return write_general_rows(inputs.sft, out, inputs.data.general, inputs.data.seed)


class SFTContrast(Contrast):
    name = "sft-contrast"
    help = (
        "LoRA SFT on the setting's contact prompts with relevance twins (a fact about the "
        "people, the answer it warrants) beside them"
    )
    method = "sft"
