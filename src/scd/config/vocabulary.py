"""The SCD paper's vocabulary (Raj et al. 2024) in one place: contact principles, scenarios,
actions, contact types and prompt scales, in the paper's order, with their display labels.

The prompt generator (``scd.data_gen.templates``), the metrics, the tables and the figures read
these; the prompt text itself lives in ``scd/data_gen/data/*.yaml``. Also here: the columns of
every Parquet table scd writes, and the shape of a run's ``layout.json``.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

__all__ = [
    "ACTIONS",
    "AQ27_COLUMNS",
    "CONTACTS",
    "CONTACT_LABELS",
    "COUNT_COLUMNS",
    "PRINCIPLES",
    "PROMPT_COLUMNS",
    "PROMPT_LABELS",
    "RunLayout",
    "SCALES",
    "SCD_ARM",
    "SETTING_DATA",
    "SCENARIOS",
    "SCENARIO_TABLE_ORDER",
    "SDS_COLUMNS",
    "SENTIMENT_COLUMNS",
    "STIGMA_TABLES",
    "ArmLayout",
    "SettingLayout",
]

PRINCIPLES = (
    "equal_status",
    "common_goals",
    "intergroup_cooperation",
    "support_of_authorities",
    "extended_contact",
    "virtual_contact",
)
SCENARIOS = ("education", "workplace", "sports", "community", "healthcare")  # as generated
SCENARIO_TABLE_ORDER = tuple(sorted(SCENARIOS))  # the columns of Tables 3-8
ACTIONS = ("positive", "negative")
CONTACTS = ("none", "positive", "negative")
CONTACT_LABELS = {
    "none": "No contact",
    "positive": "Positive contact",
    "negative": "Negative contact",
}
SCALES = ("certainty", "likelihood", "frequency")

# -- Parquet schemas: the columns of each table scd writes, in order -----------------------------
PROMPT_LABELS = (
    "principle",
    "scenario",
    "action",
    "scale",
    "contact",
    "axis",
    "bucket",
    "descriptor",
)  # what a contact prompt is about
PROMPT_COLUMNS = (
    "set_id",
    "prompt_id",
    *PROMPT_LABELS,
    "prompt",
    "options",
    "unbiased_answer",
    "biased_answer",
    "instruction",
)  # prompts.parquet
COUNT_COLUMNS = PROMPT_LABELS[:6]  # a prompt set's manifest counts its prompts by these
SDS_COLUMNS = (  # sds.parquet: Social Distance Scale prompts
    "prompt_id",
    "template",
    "item",
    "item_key",
    "baseline",
    "condition",
    "category",
    "stigmatized",
    "form_index",
    "form",
    "prompt",
)
SENTIMENT_COLUMNS = tuple(c for c in SDS_COLUMNS if c not in ("item", "item_key"))  # sentiment
AQ27_COLUMNS = (  # aq27.parquet: AQ-27 items in frames
    "prompt_id",
    "frame_id",
    "item",
    "dimension",
    "reverse",
    "noun_kind",
    "noun_phrase",
    "illness",
    "illness_type",
    "frame",
    "prompt",
)
STIGMA_TABLES = {"sds": SDS_COLUMNS, "sentiment": SENTIMENT_COLUMNS, "aq27": AQ27_COLUMNS}


# -- layout.json: where ``scd run`` put each result ----------------------------------------------
# SCD's own arm (the paper's LoRA SFT): layout.json's settings; named by its setting alone (its
# task, W&B run, Hub repository); its directory is setting-N/arm-sft, as any arm's
SCD_ARM = "sft"
# a setting's SFT data and held-out prompts, which every arm reads: setting-N/sft (layout.json's
# "sft"); not an arm
SETTING_DATA = "sft"


class SettingLayout(TypedDict):
    sft: str  # the setting's SFT data (and held-out prompts)
    adapter: str  # its LoRA adapter
    evals: dict[str, str]  # job (a benchmark's name) -> result directory of the tuned model


class ArmLayout(TypedDict):
    setting: int | None  # None: the base model
    arm: str  # base, prompt, general, sft, dpo, kto
    sft: str | None  # the setting's SFT data (and held-out prompts)
    adapter: str | None  # a trained arm's LoRA adapter
    system_prompt: str | None  # the prompt arm's system message
    evals: dict[str, str]  # job -> result directory
    capability: str | None  # its capability cost (KL, lm-eval)
    seed: NotRequired[int]  # the arena's seeds: the seed a trained arm's row was trained with
    steer: NotRequired[str]  # a steer arm's steering search (its steer.json)
    erase: NotRequired[str]  # an erase arm's eraser search (its erase.json)


class _RunLayout(TypedDict):
    model: str  # the model as loaded (a directory or Hub id)
    fingerprint: str  # its fingerprint (scd.models.model_fingerprint)
    prompts: str  # the contact prompt set
    eval_prompts: str | None  # a source split's second prompt set
    base: dict[str, str]  # job (bias, bias_eval_prompts, bbq, sds, ...) -> base result dir
    settings: dict[str, SettingLayout]  # "1".."8"


class RunLayout(_RunLayout, total=False):
    arms: list[ArmLayout]  # the arena (a recipe with arms:), base first
    unfinished: list[str]  # jobs (as in base, evals) with a result still to come: a report
    # before the run's end (scd.report.build.finished)
