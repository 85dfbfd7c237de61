"""The bias benchmark's columns of the arena table, as the table shows what
:func:`~scd.eval.benchmarks.bias.arena.bias_arena` gives."""

from __future__ import annotations

from typing import Any

from scd.eval.benchmarks.columns import Column

__all__ = ["BIAS_COLUMNS", "n_templates_cell"]


def _tendency_cell(row: dict[str, Any]) -> str:
    found = [
        (k.split("_")[2], v)
        for k, v in row.items()
        if k.startswith("tendency_") and k.endswith("_pct") and v is not None
    ]
    return ", ".join(f"{option.capitalize()} {v:.0f}%" for option, v in found) or "–"


def n_templates_cell(row: dict[str, Any]) -> str:
    """``3,456 (30)``: the prompts an arm answered and the clusters they come from;
    counts, also for a seeded row (the mean of equal counts is one too)."""
    if row.get("bias_n") is None:
        return "–"
    return f"{round(row['bias_n']):,} ({round(row['bias_templates'])})"


BIAS_COLUMNS = (
    Column(
        "bias_pct",
        "Bias % [95% CI]",
        "the share of the setting's held-out descriptor prompts answered with the biased option "
        "(an unparsed answer counts, as not biased), with a 95% percentile bootstrap interval "
        "that resamples whole {clusters} (the prompts of one template are not independent; "
        "a rate of 0 gets Wilson's interval with each cluster counted once)",
        ci=("bias_ci_low", "bias_ci_high"),
        table="bias",
        gain=True,
        test="bias_p",
    ),
    Column(
        "bias_p",
        "p vs base (Holm)",
        "the arm's change in bias % against the base model on the same prompts, by the exact "
        "sign-flip test over {clusters} (two-sided; with k clusters whose count changed it "
        "cannot go below 2/2^k: 0.016 with 7); in parentheses Holm-corrected across the arms "
        "of the setting (the base row is not compared with itself: –)",
        p=True,
        table="bias",
    ),
    Column(
        "baseline_pct",
        "Baseline % [95% CI]",
        "the same share on the descriptor-free baselines of the same templates (no group "
        "named), with its 95% Wilson interval (one or a few baselines per template cell)",
        ci=("baseline_ci_low", "baseline_ci_high"),
        table="bias",
    ),
    Column(
        "descriptor_effect_pts",
        "Descriptor effect, pts [95% CI]",
        "bias % minus baseline %, in points: the part of the bias that depends on the group "
        "named; a percentile bootstrap interval over {clusters}",
        ci=("descriptor_effect_ci_low", "descriptor_effect_ci_high"),
        table="bias",
    ),
    Column(
        "tendency",
        "Answer tendency",
        "per scale, the share of descriptor prompts answered with the scale's first option "
        "(Yes, Likely, Mostly)",
        table="bias",
        render=_tendency_cell,
    ),
    Column(
        "bias_n",
        "n (templates)",
        "the held-out descriptor prompts each arm answered, and the {clusters} they come "
        "from (what the intervals resample)",
        table="bias",
        render=n_templates_cell,
    ),
)
