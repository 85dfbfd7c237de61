"""DPO (TRL's DPOTrainer) on the setting's contact prompts: one pair per prompt, chosen = the
unbiased option, rejected = the biased one (the answer alone, whatever ``data.style``) -- as
many rows, so as many steps, as SFT unless its rows mix in general instructions, which have no
biased answer and are left out."""

from __future__ import annotations

from typing import Any

from scd.train.arms.contrast import Contrast
from scd.train.arms.preference import Preference

__all__ = ["DPO", "DPOContrast"]


def _pair(row: dict[str, Any], good: str, bad: str) -> list[dict[str, Any]]:
    from scd.data_gen.arms import reply

    return [
        {
            "prompt": row["prompt"],
            "chosen": reply(good),
            "rejected": reply(bad),
            "prompt_id": row["prompt_id"],
            "answer": good,
            "rejected_answer": bad,
        }
    ]


class DPO(Preference):
    name = "dpo"
    help = "LoRA DPO on the same prompts: chosen = the unbiased answer, rejected = the biased one"
    config_class = "trl:DPOConfig"
    trainer_class = "trl:DPOTrainer"
    columns = ("prompt", "chosen", "rejected")
    checked = (("chosen_ids", "answer"), ("rejected_ids", "rejected_answer"))

    make = staticmethod(_pair)

    def row_schema(self) -> Any:
        import pyarrow as pa

        from scd.data_gen.arms import CONVERSATION

        return pa.schema(
            [
                ("prompt", CONVERSATION),
                ("chosen", CONVERSATION),
                ("rejected", CONVERSATION),
                ("prompt_id", pa.string()),
                ("answer", pa.string()),
                ("rejected_answer", pa.string()),
            ]
        )


class DPOContrast(Contrast):
    name = "dpo-contrast"
    help = (
        "LoRA DPO on the same prompts with relevance twins beside them: chosen = the answer "
        "the fact warrants"
    )
    method = "dpo"
