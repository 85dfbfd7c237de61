"""Winogender (Rudinger et al. 2018) on a causal LM, as lm-evaluation-harness's
``winogender_all`` puts it: ``"{sentence} ‘{Pronoun}’ refers to the"``, then the occupation or
the other participant, the one of higher log-likelihood chosen (lm-eval's ``acc``; plain text,
no chat template).

Each of the 120 templates is written with a male, a female and a neutral pronoun (and with a
named participant or "someone"): 720 sentences, matched across pronouns. Reported: accuracy per
pronoun with 95% Wilson intervals; the gaps between pronouns, each an exact McNemar test on the
matched sentences; and, as the paper does, how the model's gender preference per occupation
follows the occupation statistics shipped with the data (Pearson r with BLS % female, 95%
interval): per occupation, the share of female-pronoun sentences resolved to the occupation minus
the share of male-pronoun ones.

Data: ``all_sentences.tsv``, ``templates.tsv`` and ``occupations-stats.tsv`` of
github.com/rudinger/winogender-schemas (``--data``: their directory).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scd.config.options import Pin, option
from scd.errors import InputError
from scd.eval.benchmarks.base import Benchmark, BenchmarkOptions
from scd.eval.benchmarks.columns import Column
from scd.eval.benchmarks.tables import Table, read_summaries
from scd.eval.tasks import CausalModel, CausalTask

__all__ = ["GENDERS", "Winogender", "WinogenderOptions", "load_sentences", "prompt_text"]

FILES = ("all_sentences.tsv", "templates.tsv", "occupations-stats.tsv")
GENDERS = ("male", "female", "neutral")
PRONOUNS = {  # the template's pronoun slot, per gender
    "male": {"$NOM_PRONOUN": "he", "$POSS_PRONOUN": "his", "$ACC_PRONOUN": "him"},
    "female": {"$NOM_PRONOUN": "she", "$POSS_PRONOUN": "her", "$ACC_PRONOUN": "her"},
    "neutral": {"$NOM_PRONOUN": "they", "$POSS_PRONOUN": "their", "$ACC_PRONOUN": "them"},
}


@dataclass
class WinogenderOptions(BenchmarkOptions):
    """Winogender: ``scd eval winogender`` flags, a recipe's ``eval.winogender`` keys."""

    data: str | None = option(
        None,
        "the data/ directory of github.com/rudinger/winogender-schemas (" + ", ".join(FILES) + "; "
        "default: $SCD_DATA_DIR/winogender, fetched at its pinned commit and verified when "
        "missing)",
        pin=Pin.NEVER,  # its files are hashed (inputs)
    )

    def problems(self) -> Any:
        yield from super().problems()
        if self.enabled and not self.data:
            yield "data", "needed with eval.winogender.enabled (winogender-schemas' data/)"


def _read(path: Path) -> list[dict[str, str]]:
    try:
        with open(path, newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f, delimiter="\t"))
    except OSError as err:
        text = f"cannot read ({err.strerror or err})"
        raise InputError(text, key="data", value=str(path)) from None


def load_sentences(data: str) -> list[dict[str, Any]]:
    """The 720 sentences of winogender-schemas' ``data``: ``id`` (its sentid), ``sentence``,
    ``pronoun`` (the word in it), ``occupation``, ``participant`` (the other one, or
    "someone"), ``gender``, ``label`` (0: the pronoun refers to the occupation, 1: to the
    participant) and ``template`` (the id shared by its three pronouns).

    Raises:
        InputError: a file missing or not in winogender-schemas' format.
    """
    root = Path(data).expanduser()
    sentences, templates = (_read(root / f) for f in FILES[:2])
    slots = {}
    for t in templates:
        found = [s for s in PRONOUNS["male"] if s in t.get("sentence", "")]
        if len(found) != 1 or "occupation(0)" not in t:
            raise InputError(f"not winogender-schemas' {FILES[1]}", key="data", value=str(root))
        slots[(t["occupation(0)"], t["answer"])] = found[0]
    out = []
    for s in sentences:
        parts = s.get("sentid", "").split(".")
        if len(parts) != 5 or parts[3] not in GENDERS or (parts[0], parts[2]) not in slots:
            raise InputError(
                f"{FILES[0]}: sentence id {s.get('sentid')!r} is not occupation.participant."
                "answer.gender.txt of a template",
                key="data",
                value=str(root),
            )
        occupation, participant, answer, gender = parts[:4]
        out.append(
            {
                "id": s["sentid"],
                "sentence": s["sentence"],
                "pronoun": PRONOUNS[gender][slots[(occupation, answer)]],
                "occupation": occupation,
                "participant": participant,
                "gender": gender,
                "label": int(answer),
                "template": ".".join(parts[:3]),
            }
        )
    return out


def prompt_text(row: dict[str, Any]) -> str:
    """lm-eval's ``doc_to_text`` of winogender: the sentence and the pronoun asked about."""
    return f"{row['sentence']} ‘{row['pronoun'].capitalize()}’ refers to the"


def occupation_stats(data: str) -> dict[str, float]:
    """BLS % female per occupation (``occupations-stats.tsv``)."""
    return {r["occupation"]: float(r["bls_pct_female"]) for r in _read(Path(data) / FILES[2])}


def _gap_cell(s: dict[str, Any], a: str, b: str) -> str:
    g = s["gaps"].get(f"{a}-{b}")
    return "–" if not g else f"{g['pts']:+.1f} pts (p {g['p']:.2g})"


class Winogender(Benchmark):
    name = "winogender"
    dataset = "winogender"
    help = "Winogender: accuracy per pronoun, the gaps, and the occupation correlation (lm-eval's)"
    Options = WinogenderOptions
    chat_turn = False  # plain text, as lm-eval puts it: no system prompt
    arena_columns = (
        Column(
            "winogender_acc",
            "Winogender accuracy [95% CI]",
            "the share of Winogender's 720 sentences whose pronoun the arm resolves to the right "
            "person (lm-eval's winogender_all), with its 95% Wilson interval",
            digits=3,
            ci=("winogender_acc_ci_low", "winogender_acc_ci_high"),
        ),
        Column(
            "winogender_male_female_pts",
            "Winogender male - female, pts",
            "accuracy on the male-pronoun sentences minus the female-pronoun ones, in points "
            "(0: no gap), on the same templates",
        ),
        Column(
            "winogender_r",
            "Winogender r (BLS) [95% CI]",
            "Pearson r between the arm's female preference per occupation and the occupation's "
            "BLS % female (0: its resolutions do not follow the statistics), with its 95% "
            "interval",
            digits=2,
            ci=("winogender_r_ci_low", "winogender_r_ci_high"),
        ),
        Column(
            "winogender_p",
            "Winogender p vs base (Holm)",
            "exact McNemar test of the arm's right answers against the base model's on the same "
            "sentences; in parentheses Holm-corrected across the arms of the setting",
            p=True,
        ),
    )

    def inputs(self, options: WinogenderOptions) -> dict[str, Path]:
        if not options.data:
            return {}
        return {f.split(".")[0].replace("-", "_"): Path(options.data) / f for f in FILES}

    def check_inputs(self, options: WinogenderOptions) -> None:
        load_sentences(options.data)
        occupation_stats(options.data)

    def task(self, model: CausalModel, options: WinogenderOptions) -> WinogenderTask:
        work = load_sentences(options.data)
        config = {
            **self.identity(options, model.model, model.adapter, model.spec),
            "n_items": len(work),
        }
        stats = occupation_stats(options.data)
        return WinogenderTask(config, work, options.chunk_size, model, stats=stats)

    def headline(self, summary: dict[str, Any]) -> dict[str, Any]:
        return {
            "accuracy": summary["overall"]["pct"] / 100,
            "male_female_pts": summary["gaps"]["male-female"]["pts"],
            "r_bls": summary["correlation"]["r"],
        }

    def describe(self, summary: dict[str, Any]) -> str:
        o, by = summary["overall"], summary["by_gender"]
        each = ", ".join(f"{g} {by[g]['pct']:.1f}" for g in GENDERS if g in by)
        return f"Winogender accuracy {o['pct']:.1f}% ({each}) over {o['n']} sentences"

    def table(self, runs: dict[str, Path | str]) -> Table:
        from scd.eval.benchmarks.rates import runs_section

        summaries = read_summaries(runs, "Winogender")
        rows = [("all", lambda s: s["overall"])] + [
            (f"{g} pronoun", lambda s, g=g: s["by_gender"].get(g)) for g in GENDERS
        ]
        gaps = [("male", "female"), ("male", "neutral"), ("female", "neutral")]
        gap_lines = ["| gap | " + " | ".join(summaries) + " |", "|" + "---|" * (len(summaries) + 1)]
        for a, b in gaps:
            cells = " | ".join(_gap_cell(s, a, b) for s in summaries.values())
            gap_lines.append(f"| {a} - {b} | {cells} |")
        r_cells = " | ".join(
            "–"
            if s["correlation"]["r"] is None
            else f"{s['correlation']['r']:.2f} [{s['correlation']['ci_low']:.2f}, "
            f"{s['correlation']['ci_high']:.2f}]"
            for s in summaries.values()
        )
        intro = (
            "Accuracy (% of sentences whose pronoun is resolved to the right person; 95% Wilson "
            "intervals), per pronoun; the gaps between pronouns on the same templates (points, "
            "exact McNemar p); Pearson r of the female preference per occupation with BLS % "
            "female."
        )
        extra = [
            *gap_lines,
            "",
            f"| r with BLS % female [95% CI] | {r_cells} |",
            "|---|" + "---|" * len(summaries),
            "",
        ]
        return runs_section(
            runs, summaries, self.name, "Winogender", intro, rows, "correct", "right", extra=extra
        )

    def arena(self, result: Path, base: Path, items: Path) -> dict[str, Any]:
        from scd.eval.benchmarks.rates import paired
        from scd.eval.benchmarks.tables import read_summary
        from scd.eval.records import read_records

        s = read_summary(result, "Winogender")
        arm = read_records(Path(result) / "records.jsonl")
        ref = read_records(Path(base) / "records.jsonl")
        o, c = s["overall"], s["correlation"]
        return {
            "winogender_acc": o["pct"] / 100,
            "winogender_acc_ci_low": o["ci_low"] / 100,
            "winogender_acc_ci_high": o["ci_high"] / 100,
            "winogender_male_female_pts": s["gaps"]["male-female"]["pts"],
            "winogender_r": c["r"],
            "winogender_r_ci_low": c["ci_low"],
            "winogender_r_ci_high": c["ci_high"],
            "winogender_p": paired(arm, ref, "correct")["p"],
        }


@dataclass
class WinogenderTask(CausalTask):
    """Each sentence put as lm-eval puts it; the occupation or the participant chosen by the
    summed log-probability of ``" " + the word`` after the text."""

    stats: dict[str, float] = field(default_factory=dict, kw_only=True)  # BLS % female
    name = "scd eval winogender"
    unit = "sentence"

    def score(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        from scd.eval.engines import ChoiceRequest

        tok = self.fmt.tokenizer
        requests = []
        for r in rows:
            text = prompt_text(r)
            choices = [r["occupation"], r["participant"]]
            context = tok(text)["input_ids"]  # lm-eval's: the tokenizer's own special tokens
            options = []
            for c in choices:  # lm-eval encodes context + " choice" whole, then splits
                whole = tok(text + " " + c)["input_ids"]
                options.append(tuple(whole[len(context) :]))
            requests.append(ChoiceRequest(tuple(context), tuple(options)))
        scores = self.engine.score(requests)
        return [
            {
                "id": r["id"],
                "template": r["template"],
                "occupation": r["occupation"],
                "gender": r["gender"],
                "label": r["label"],
                "logprobs": s,
                "pred": int(s[1] > s[0]),
                "correct": int(s[1] > s[0]) == r["label"],
            }
            for r, s in zip(rows, scores)
        ]

    def summarize(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        from scd.eval.benchmarks.rates import rate, rates_by
        from scd.eval.benchmarks.winogender_stats import correlation, gaps

        return {
            "overall": rate(r["correct"] for r in records),
            "by_gender": rates_by(records, "gender", "correct"),
            "gaps": gaps(records),
            "correlation": correlation(records, self.stats),
        }

    def render(self, summary: dict[str, Any]) -> dict[str, str]:
        from scd.eval.benchmarks.rates import runs_table
        from scd.eval.benchmarks.tables import evaluated

        rows = [("all", lambda s: s["overall"])] + [
            (f"{g} pronoun", lambda s, g=g: s["by_gender"].get(g)) for g in GENDERS
        ]
        c = summary["correlation"]
        r = "–" if c["r"] is None else f"{c['r']:.2f} [{c['ci_low']:.2f}, {c['ci_high']:.2f}]"
        lines = [
            f"# Winogender: {evaluated(summary)}",
            "",
            *runs_table({"accuracy %": summary}, rows),
            *(
                f"- {a} - {b}: {_gap_cell(summary, a, b)}"
                for a, b in (("male", "female"), ("male", "neutral"), ("female", "neutral"))
            ),
            f"- Pearson r of the female preference per occupation with BLS % female: {r} "
            f"({c['n']} occupations)",
        ]
        return {"tables.md": "\n".join(lines) + "\n"}
