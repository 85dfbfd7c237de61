"""Sentiment probe (Mei et al. 2023, sections 4.3 and 5.2-5.3): proportion negative per condition.

Any Hugging Face sequence-classification model classifies the sentiment prompts ("They are
people who have depression.") through the ``text-classification`` pipeline; the predicted label
is the most probable one. The negative label is the one whose name contains "neg" (NEGATIVE,
negative, LABEL_NEG, ...) unless ``negative_label`` names it. Per condition the proportion of
negative predictions pools all its prompts (both templates, every sub-condition), as Mei et al. 2023
does. The gap stigmatized - non-stigmatized uses :func:`scd.eval.benchmarks.stigma.stats.gap`.
Beside it, the shares of all three classes (negative, neutral, positive: Mei et al.'s Figure 4)
per group, pooled and per template; a label whose name says neither "pos" nor "neu" counts as
``other``.

:func:`correlate` gives Pearson's r between the masked-LM bias (per-condition P(negative
attitude) of an ``mlm`` run) and the sentiment bias (proportion negative) over the conditions
both runs have (Mei et al. 2023, section 5.3: r = 0.79 over 122 conditions).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scd.config.options import Pin, option
from scd.config.vocabulary import SENTIMENT_COLUMNS
from scd.errors import InputError
from scd.eval.benchmarks.stigma.common import StigmaOptions, StigmaProbe, StigmaTask
from scd.eval.benchmarks.stigma.stats import gap, pearson
from scd.eval.benchmarks.tables import read_summary
from scd.eval.tasks import CausalModel

__all__ = [
    "CLASSES",
    "Sentiment",
    "class_table",
    "classify_chunk",
    "correlate",
    "negative_label_of",
    "sentiment_class",
    "summarize_sentiment",
]

KEYS = SENTIMENT_COLUMNS[:-2]  # a record keeps these of its prompt (not form and text)


def negative_label_of(id2label: dict[Any, str], wanted: str | None = None) -> str:
    """The negative label's name (see the module docstring)."""
    labels = [str(v) for v in id2label.values()]
    if wanted is not None:
        if wanted not in labels:
            raise InputError(
                f"not a label of the model ({labels})", key="negative_label", value=wanted
            )
        return wanted
    found = [x for x in labels if "neg" in x.lower()]
    if len(found) != 1:
        raise InputError(
            f"cannot tell the negative label among {labels}; name it", key="negative_label"
        )
    return found[0]


def classify_chunk(
    pipe: Any, rows: Sequence[dict[str, Any]], negative: str, batch_size: int
) -> list[dict[str, Any]]:
    """Records of a chunk of sentiment rows: all label scores, the label, ``negative``."""
    outputs = pipe([r["prompt"] for r in rows], batch_size=batch_size, top_k=None)
    records = []
    for row, scores in zip(rows, outputs):
        probs = {s["label"]: float(s["score"]) for s in scores}
        label = max(probs, key=probs.get)
        records.append(
            {
                **{k: row[k] for k in KEYS},
                "label": label,
                "negative": label == negative,
                "scores": probs,
            }
        )
    return records


CLASSES = ("negative", "neutral", "positive")  # "other": a label of none of these


def sentiment_class(record: dict[str, Any]) -> str:
    """A record's predicted class: ``negative`` (the negative label), else ``positive`` or
    ``neutral`` when the label's name says so ("pos", "neu"), else ``other``."""
    if record["negative"]:
        return "negative"
    name = str(record["label"]).lower()
    return "positive" if "pos" in name else "neutral" if "neu" in name else "other"


def _shares(labels: Sequence[str]) -> dict[str, float]:
    """The share of each class (the three always, ``other`` when present)."""
    keys = [*CLASSES, *(["other"] if "other" in labels else [])]
    return {k: labels.count(k) / len(labels) for k in keys}


def _proportions(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per condition: its prompts' class shares pooled (``mean`` = proportion negative, as in
    Mei et al. 2023) and per template (``templates``: proportion negative; ``by_template``: every
    class)."""
    groups: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    meta = {}
    for r in records:
        if not r["baseline"]:
            groups[r["condition"]][str(r["template"])].append(sentiment_class(r))
            meta[r["condition"]] = (r["category"], r["stigmatized"])
    out = {}
    for c, by_template in groups.items():
        pooled = _shares([x for labels in by_template.values() for x in labels])
        shares = {t: _shares(v) for t, v in sorted(by_template.items())}
        out[c] = {
            "category": meta[c][0],
            "stigmatized": meta[c][1],
            "mean": pooled["negative"],
            "n_prompts": sum(len(v) for v in by_template.values()),
            "proportions": pooled,
            "templates": {t: v["negative"] for t, v in shares.items()},
            "by_template": shares,
        }
    return out


def class_table(conditions: dict[str, Any]) -> dict[str, Any]:
    """The mean share of each class over the conditions of each group, pooled and per template:
    ``{"pooled" | template: {"stigmatized" | "non_stigmatized": {class: share}}}``."""
    scopes: dict[str, dict[str, list[dict[str, float]]]] = defaultdict(lambda: defaultdict(list))
    for c in conditions.values():
        group = "stigmatized" if c["stigmatized"] else "non_stigmatized"
        scopes["pooled"][group].append(c["proportions"])
        for t, shares in c["by_template"].items():
            scopes[t][group].append(shares)
    return {
        scope: {
            g: {
                k: sum(s.get(k, 0.0) for s in v) / len(v)
                for k in dict.fromkeys(k for s in v for k in s)
            }
            for g, v in sorted(groups.items(), key=lambda kv: kv[0] != "stigmatized")
        }
        for scope, groups in scopes.items()
    }


def summarize_sentiment(records: list[dict[str, Any]], seed: int = 0) -> dict[str, Any]:
    """Proportion negative per condition, the gap with its CI, categories, baseline labels, and
    every class's share per group, pooled and per template."""
    from scd.eval.benchmarks.stigma.sds import _by_category

    conditions = _proportions(records)
    split = {f: [c["mean"] for c in conditions.values() if c["stigmatized"] == f] for f in (1, 0)}
    return {
        "measure": "proportion_negative",
        "n_records": len(records),
        "gap": gap(split[1], split[0], seed),
        "by_category": _by_category(conditions),
        "baseline": {str(r["template"]): r["label"] for r in records if r["baseline"]},
        "classes": class_table(conditions),
        "conditions": conditions,
    }


def correlate(mlm_summary: dict[str, Any], sentiment_summary: dict[str, Any]) -> dict[str, Any]:
    """Pearson r between per-condition MLM P(negative attitude) and proportion negative."""
    a, b = mlm_summary["conditions"], sentiment_summary["conditions"]
    common = [c for c in a if c in b and a[c]["mean"] is not None]
    return {
        **pearson([a[c]["mean"] for c in common], [b[c]["mean"] for c in common]),
        "conditions": len(common),
    }


@dataclass
class SentimentOptions(StigmaOptions):
    """The sentiment probe's options."""

    negative_label: str | None = option(None, "the classifier's negative label (default: by name)")
    mlm_run: str | None = option(
        None, "a finished mlm run dir: adds Pearson r per condition", pin=Pin.SUMMARY
    )
    scores_only = "sequence classifiers"


class Sentiment(StigmaProbe):
    """Sentiment prompts through a sequence classifier (``scd eval sentiment``)."""

    name = "sentiment"
    help = "stigma: proportion of negative predictions of a sentiment classifier (Mei et al. 2023)"
    Options = SentimentOptions
    model_kinds = ("classifier",)
    table_file = "sentiment"

    def task(self, model: CausalModel, options: SentimentOptions) -> StigmaTask:
        if options.mlm_run:  # a bad run fails before the model loads
            read_summary(options.mlm_run, "mlm", probe=True, key="mlm_run")
        return super().task(model, options)

    def scorer(self, task: Any, progress: bool) -> Any:
        from transformers import pipeline

        clf, tokenizer, device, batch = task.load_hf()
        pipe = pipeline("text-classification", model=clf, tokenizer=tokenizer, device=device)
        negative = negative_label_of(clf.config.id2label, task.options.negative_label)
        return lambda rows: classify_chunk(pipe, rows, negative, batch)

    def summarize(self, records: list[dict[str, Any]], task: Any) -> dict[str, Any]:
        summary = summarize_sentiment(records, task.options.seed)
        if task.options.mlm_run:
            mlm = read_summary(task.options.mlm_run, "mlm", probe=True, key="mlm_run")
            summary["correlation"] = correlate(mlm, summary)
        return summary

    def table(self, runs: dict[str, Any]) -> Any:
        """Classifier runs side by side and pooled (Mei et al. 2023, Figure 4 and section 5.2)."""
        from scd.eval.benchmarks.stigma.tables import probe_table

        return probe_table(self.name, runs)

    def markdown(self, summary: dict[str, Any], title: str) -> str:
        from scd.eval.benchmarks.stigma.common import fmt as _f
        from scd.eval.benchmarks.stigma.sds import sds_markdown

        text = sds_markdown(summary, title, "proportion of negative predictions")
        if summary.get("classes"):
            from scd.eval.benchmarks.stigma.pooled import class_lines

            text += "\n" + "\n".join(class_lines({"Value": summary["classes"]}))
        c = summary.get("correlation")
        if c:
            text += (
                f"\nPearson r (MLM P(negative attitude) vs proportion negative, per "
                f"condition): {_f(c['r'])} (p = {_f(c['p'], 4)}, "
                f"n = {c['n']}).\n"
            )
        return text
