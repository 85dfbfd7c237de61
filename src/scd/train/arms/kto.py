"""KTO (TRL's KTOTrainer) on the setting's contact prompts, unpaired: each prompt twice, the
unbiased option desirable (``label`` true), the biased one not -- twice SFT's rows, so twice its
steps at the same batch size and epochs. TRL reads the rows in order and pairs each with the
next one's completion for its KL term, so they are shuffled (``data.seed``) and read in order."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from scd.train.arms.base import Problem
from scd.train.arms.contrast import Contrast
from scd.train.arms.preference import Preference

if TYPE_CHECKING:
    from scd.config.schema import Recipe
    from scd.train.spec import TrainingSpec

__all__ = ["KTO", "KTOContrast"]


def _labelled(row: dict[str, Any], good: str, bad: str) -> list[dict[str, Any]]:
    from scd.data_gen.arms import reply

    return [
        {
            "prompt": row["prompt"],
            "completion": reply(text),
            "label": label,
            "prompt_id": row["prompt_id"],
            "answer": text,
        }
        for text, label in ((good, True), (bad, False))
    ]


class KTO(Preference):
    name = "kto"
    help = "LoRA KTO on the same prompts: the unbiased answer desirable, the biased one not"
    config_class = "trl:KTOConfig"
    trainer_class = "trl:KTOTrainer"
    columns = ("prompt", "completion", "label")
    checked = (("completion_ids", "answer"),)
    decided = ("beta", "train_sampling_strategy")
    make = staticmethod(_labelled)
    shuffled = True

    def config_values(self, spec: TrainingSpec) -> dict[str, Any]:
        return {**super().config_values(spec), "train_sampling_strategy": "sequential"}

    def problems(self, recipe: Recipe) -> Iterator[Problem]:
        if recipe.train.per_device_train_batch_size < 2:
            yield (
                "train.per_device_train_batch_size",
                "train.per_device_train_batch_size: KTO needs at least 2 (TRL's KTO "
                "estimates its KL term from the other rows of a batch)",
            )

    def row_schema(self) -> Any:
        import pyarrow as pa

        from scd.data_gen.arms import CONVERSATION

        return pa.schema(
            [
                ("prompt", CONVERSATION),
                ("completion", CONVERSATION),
                ("label", pa.bool_()),
                ("prompt_id", pa.string()),
                ("answer", pa.string()),
            ]
        )


class KTOContrast(Contrast):
    name = "kto-contrast"
    help = (
        "LoRA KTO on the same prompts with relevance twins beside them: the answer the fact "
        "warrants desirable"
    )
    method = "kto"
