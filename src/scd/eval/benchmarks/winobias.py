"""WinoBias (Zhao et al. 2018) as a choice for an instruction model: each sentence names two
occupations and a pronoun; the model is asked, through its chat template, which occupation the
pronoun refers to, and the option (the occupation's words as its reply) of higher summed
log-probability is its answer.

Every sentence comes twice, pro-stereotypical (the pronoun's gender matches the occupation's
stereotype, per the occupation lists shipped with the data) and anti-stereotypical (it does not),
with the same right answer. Type 1 sentences need world knowledge to resolve, type 2 follow the
syntax. Reported per type: accuracy on pro and anti with 95% Wilson intervals, and the gap (pro -
anti, points) with a percentile bootstrap interval over the sentence pairs and an exact McNemar
test paired by sentence -- a model that resolves by gender stereotype shows a gap; one that reads
the sentence does not.

Data: the ``wino/data`` files of github.com/uclanlp/corefBias, read by
:mod:`scd.eval.benchmarks.winobias_data`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from scd.config.options import Pin, option, positive
from scd.errors import InputError
from scd.eval.benchmarks.base import Benchmark, BenchmarkOptions
from scd.eval.benchmarks.columns import Column
from scd.eval.benchmarks.tables import Table, read_summaries
from scd.eval.benchmarks.winobias_data import (
    KINDS,
    OCCUPATIONS,
    TYPES,
    load_sentences,
    question,
    sentence_files,
)
from scd.eval.tasks import CausalModel, CausalTask

__all__ = ["WinoBias", "WinoBiasOptions"]

GAP_RESAMPLES, GAP_SEED = 2000, 0


@dataclass
class WinoBiasOptions(BenchmarkOptions):
    """WinoBias: ``scd eval winobias`` flags, a recipe's ``eval.winobias`` keys."""

    data: str | None = option(
        None,
        "the wino/data directory of github.com/uclanlp/corefBias (default: $SCD_DATA_DIR/winobias, "
        "fetched at its pinned commit and verified when missing)",
        pin=Pin.NEVER,  # its files are hashed (inputs)
    )
    split: Literal["test", "dev"] = option("test", "the split of the sentences")
    limit: int | None = option(
        None,
        "~N sentence pairs (pro and anti of each), the same share of each type, seeded",
        check=positive,
    )
    seed: int = option(0, "seed of the --limit subset")

    def problems(self) -> Any:
        yield from super().problems()
        if self.enabled and not self.data:
            yield "data", "needed with eval.winobias.enabled (corefBias' wino/data directory)"


def _gap(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Accuracy on pro minus anti (points) on the pairs both hold: a percentile bootstrap
    interval over pairs and the exact McNemar test paired by pair."""
    import numpy as np
    import pandas as pd
    from scipy import stats

    from scd.eval.benchmarks.paired import mcnemar_pair

    pro = pd.Series({r["pair"]: bool(r["correct"]) for r in records if r["kind"] == "pro"})
    anti = pd.Series({r["pair"]: bool(r["correct"]) for r in records if r["kind"] == "anti"})
    both = pro.index.intersection(anti.index)
    if not len(both):
        return {"pts": None, "ci_low": None, "ci_high": None, "p": None, "n": 0}
    x, y = pro[both].to_numpy(float), anti[both].to_numpy(float)
    point = 100.0 * (x.mean() - y.mean())
    low = high = point
    if len(both) > 1 and (x != y).any():
        res = stats.bootstrap(
            (x, y),
            lambda a, b, axis=-1: 100.0 * (a.mean(axis) - b.mean(axis)),
            paired=True,
            n_resamples=GAP_RESAMPLES,
            method="percentile",
            rng=np.random.default_rng(GAP_SEED),
        )
        low, high = res.confidence_interval
    test = mcnemar_pair(pro[both], anti[both])  # to_true: right on pro only (false on anti)
    return {
        "pts": float(point),
        "ci_low": float(low),
        "ci_high": float(high),
        "p": test["p"],
        "n": int(len(both)),
        "pro_only": test["to_true"],  # right on pro, wrong on anti
        "anti_only": test["to_false"],
    }


def _gap_cell(g: dict[str, Any] | None) -> str:
    if not g or g.get("pts") is None:
        return "–"
    return f"{g['pts']:+.1f} [{g['ci_low']:+.1f}, {g['ci_high']:+.1f}] (p {g['p']:.2g})"


class WinoBias(Benchmark):
    name = "winobias"
    dataset = "winobias"
    help = "WinoBias: accuracy on pro- and anti-stereotypical sentences and the gap (paired)"
    Options = WinoBiasOptions
    arena_columns = (
        Column(
            "winobias_anti_acc",
            "WinoBias anti accuracy [95% CI]",
            "the share of WinoBias' anti-stereotypical sentences (both types) whose pronoun the "
            "arm resolves right, with its 95% Wilson interval",
            digits=3,
            ci=("winobias_anti_acc_ci_low", "winobias_anti_acc_ci_high"),
        ),
        Column(
            "winobias_gap_pts",
            "WinoBias pro - anti, pts [95% CI]",
            "accuracy on the pro-stereotypical sentences minus on their anti-stereotypical "
            "versions, in points (0: gender plays no part), with a percentile bootstrap "
            "interval over the sentence pairs",
            ci=("winobias_gap_ci_low", "winobias_gap_ci_high"),
        ),
        Column(
            "winobias_gap_p",
            "WinoBias gap p vs base (Holm)",
            "the arm's change in the pro - anti gap against the base model's, paired per "
            "sentence pair (each pair's gap under the arm minus under the base), by the exact "
            "sign-flip test over pairs (two-sided); in parentheses Holm-corrected across the "
            "arms of the setting",
            p=True,
        ),
        Column(
            "winobias_p",
            "WinoBias p vs base (Holm)",
            "exact McNemar test of the arm's right answers against the base model's on the same "
            "sentences; in parentheses Holm-corrected across the arms of the setting",
            p=True,
        ),
    )

    def inputs(self, options: WinoBiasOptions) -> dict[str, Path]:
        if not options.data:
            return {}
        files = {f"{k}_{t}": p for (k, t), p in sentence_files(options.data, options.split).items()}
        return {**files, **{f.split("_")[0]: Path(options.data) / f for f in OCCUPATIONS}}

    def check_inputs(self, options: WinoBiasOptions) -> None:
        if not load_sentences(options.data, options.split):
            raise InputError("no sentences", key="eval.winobias.data", value=options.data)

    def toy_words(self, options: WinoBiasOptions) -> tuple[str, ...]:
        """Every occupation the split's sentences are asked about (the toy's prompts name none);
        the whole split's, so a ``--limit`` subset is scored by the same toy."""
        rows = load_sentences(options.data, options.split)
        return tuple(sorted({o for r in rows for o in r["options"]}))

    def task(self, model: CausalModel, options: WinoBiasOptions) -> WinoBiasTask:
        work = load_sentences(options.data, options.split)
        if options.limit is not None:  # whole pairs: the gap is paired
            from scd.eval.sampling import stratified_sample

            pairs = list(dict.fromkeys((r["type"], r["pair"]) for r in work))
            keep = {pairs[i][1] for i in stratified_sample(pairs, options.limit, options.seed)}
            work = [r for r in work if r["pair"] in keep]
        config = {
            **self.identity(options, model.model, model.adapter, model.spec),
            "n_items": len(work),
        }
        return WinoBiasTask(config, work, options.chunk_size, model)

    def headline(self, summary: dict[str, Any]) -> dict[str, Any]:
        return {
            "pro": summary["by_kind"]["pro"]["pct"] / 100,
            "anti": summary["by_kind"]["anti"]["pct"] / 100,
            "gap_pts": summary["gap"]["pts"],
        }

    def describe(self, summary: dict[str, Any]) -> str:
        k = summary["by_kind"]
        gap = _gap_cell(summary["gap"])
        return f"WinoBias pro {k['pro']['pct']:.1f}%, anti {k['anti']['pct']:.1f}%, gap {gap}"

    def table(self, runs: dict[str, Path | str]) -> Table:
        from scd.eval.benchmarks.rates import runs_section

        summaries = read_summaries(runs, "WinoBias")
        rows = [
            (f"{t} {k}", lambda s, t=t, k=k: s["by_type_kind"].get(f"{t}-{k}"))
            for t in TYPES
            for k in KINDS
        ]
        names = list(summaries)
        gap_lines = ["| pro - anti, pts | " + " | ".join(names) + " |"]
        gap_lines.append("|" + "---|" * (len(names) + 1))
        for label, key in (("type 1", "type1"), ("type 2", "type2"), ("both", None)):
            cells = [
                _gap_cell(s["gap"] if key is None else s["gap_by_type"].get(key))
                for s in summaries.values()
            ]
            gap_lines.append(f"| {label} | " + " | ".join(cells) + " |")
        intro = (
            "Accuracy (% of sentences whose pronoun is resolved to the right occupation; 95% "
            "Wilson intervals) on pro- and anti-stereotypical sentences, and the gap (points; "
            "percentile bootstrap over sentence pairs, exact McNemar p paired by sentence)."
        )
        return runs_section(
            runs,
            summaries,
            self.name,
            "WinoBias",
            intro,
            rows,
            "correct",
            "right",
            extra=[*gap_lines, ""],
        )

    def arena(self, result: Path, base: Path, items: Path) -> dict[str, Any]:
        from scd.eval.benchmarks.gap_change import gap_change
        from scd.eval.benchmarks.rates import paired
        from scd.eval.benchmarks.tables import read_summary
        from scd.eval.records import read_records

        s = read_summary(result, "WinoBias")
        arm = read_records(Path(result) / "records.jsonl")
        ref = read_records(Path(base) / "records.jsonl")
        anti, gap = s["by_kind"]["anti"], s["gap"]
        return {
            "winobias_anti_acc": anti["pct"] / 100,
            "winobias_anti_acc_ci_low": anti["ci_low"] / 100,
            "winobias_anti_acc_ci_high": anti["ci_high"] / 100,
            "winobias_pro_acc": s["by_kind"]["pro"]["pct"] / 100,
            "winobias_gap_pts": gap["pts"],
            "winobias_gap_ci_low": gap["ci_low"],
            "winobias_gap_ci_high": gap["ci_high"],
            "winobias_gap_p": gap_change(arm, ref, "pair", ("pro", "anti"))["p"],
            "winobias_p": paired(arm, ref, "correct")["p"],
        }


class WinoBiasTask(CausalTask):
    """Each sentence's question through the chat template; the occupation of higher summed
    log-probability as the reply is the answer."""

    name = "scd eval winobias"
    unit = "sentence"

    def score(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        from scd.eval.engines import ChoiceRequest

        users = [question(r) for r in rows]
        ids = self.fmt.encode(users)
        options = [self.fmt.option_ids(tuple(r["options"])) for r in rows]
        chats = [self.fmt.conversation(u) for u in users]
        scores = self.engine.score(
            [
                ChoiceRequest(tuple(i), o, c, tuple(r["options"]))
                for i, o, c, r in zip(ids, options, chats, rows)
            ]
        )
        out = []
        for r, s in zip(rows, scores):
            pick = r["options"][int(s[1] > s[0])]
            out.append(
                {
                    "id": r["id"],
                    "pair": r["pair"],
                    "type": r["type"],
                    "kind": r["kind"],
                    "options": r["options"],
                    "answer": r["answer"],
                    "logprobs": s,
                    "pick": pick,
                    "correct": pick == r["answer"],
                }
            )
        return out

    def summarize(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        from scd.eval.benchmarks.rates import rate, rates_by

        for r in records:
            r["type_kind"] = f"{r['type']}-{r['kind']}"
        return {
            "overall": rate(r["correct"] for r in records),
            "by_kind": rates_by(records, "kind", "correct"),
            "by_type_kind": rates_by(records, "type_kind", "correct"),
            "gap": _gap(records),
            "gap_by_type": {t: _gap([r for r in records if r["type"] == t]) for t in TYPES},
        }

    def render(self, summary: dict[str, Any]) -> dict[str, str]:
        from scd.eval.benchmarks.rates import runs_table
        from scd.eval.benchmarks.tables import evaluated

        rows = [
            (f"{t} {k}", lambda s, t=t, k=k: s["by_type_kind"].get(f"{t}-{k}"))
            for t in TYPES
            for k in KINDS
        ]
        lines = [
            f"# WinoBias: {evaluated(summary)}",
            "",
            *runs_table({"accuracy %": summary}, rows),
            f"- pro - anti, both types: {_gap_cell(summary['gap'])}",
            *(f"- pro - anti, {t}: {_gap_cell(summary['gap_by_type'][t])}" for t in TYPES),
        ]
        return {"tables.md": "\n".join(lines) + "\n"}
