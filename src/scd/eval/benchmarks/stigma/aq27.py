"""AQ-27 probe (Mina et al. 2024): how likely a model finds each illness in each stigma item.

Mina et al. 2024 "reverse" Lin et al.'s paradigm: the noun phrase is filled in and the model scores
the illnesses in the masked slot (PLL-word-l2r on masked LMs,
:mod:`~scd.eval.benchmarks.stigma.mlm`). On a causal LM the analogue is the log-likelihood of the
sentence with the illness filled in. The frame's text before the slot is the prompt and "illness +
rest of the sentence" the continuation,
so one :class:`ChoiceRequest` per frame scores every illness: ``log p(continuation | prefix)``
equals ``log p(sentence) - log p(prefix)``, and the prefix term is the same for every illness of
a frame. The text is scored as plain text (no chat template), with the tokenizer's BOS.

**Prior correction (causal LMs).** That raw score (``score_raw``) mostly measures the illness
*name*: its number of tokens and its frequency ("Alzheimer's" costs two tokens, "OCD" one), so
raw mental - physical differences compare word lists, not attitudes. As in Kurita et al. (2019,
increased log probability), the score is the raw score minus the same illness's score in a
neutral context -- the item's own noun phrase and relative clause in a sentence that says
nothing else (:data:`NEUTRAL_FRAME`, e.g. "This is James, who has <mask>.")::

    score = log p(illness + rest | item prefix) - log p(illness + "." | neutral prefix)

The name's cost appears in both terms and cancels; what is left is how much more (or less) the
item makes the illness -- and the rest of the item after it -- expected than a neutral sentence
does. ``score_prior`` keeps the subtracted term.

Statistics (:func:`~scd.eval.benchmarks.stigma.stats.mental_vs_physical`): per frame the mean
score of the mental and of the physical illnesses, Wilcoxon signed-rank over frames, overall and per
dimension (Bonferroni over the 9 dimensions), and Cronbach's alpha per dimension over the
mental illnesses. Reverse-scored items (avoidance, help: willingness) are not flipped, as in
Mina et al. 2024; read a positive difference there as *less* stigma.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from scd.config.vocabulary import AQ27_COLUMNS
from scd.eval.benchmarks.base import Table, markdown_table, read_summaries
from scd.eval.benchmarks.stigma.common import StigmaOptions, StigmaProbe
from scd.eval.benchmarks.stigma.stats import mental_vs_physical
from scd.eval.engines import ChoiceRequest

__all__ = [
    "AQ27", "AQ27_KEYS", "DIMENSIONS", "NEUTRAL_FRAME", "aq27_markdown", "neutral_frame",
    "score_chunk", "summarize_aq27",
]  # fmt: skip

NEUTRAL_FRAME = "This is {noun_phrase}{comma} who has <mask>."  # the prior's context

DIMENSIONS = (
    "anger",
    "dangerousness",
    "fear",
    "coercion",
    "segregation",
    "avoidance",
    "help",
    "pity",
    "blame",
)
AQ27_KEYS = tuple(c for c in AQ27_COLUMNS if c not in ("frame", "prompt"))  # record keys


def _split_ids(tokenizer: Any, frame: str, illness: str) -> tuple[list[int], list[int]]:
    """Token ids of the frame's prefix (with BOS) and of `` illness + rest``."""
    prefix, rest = frame.split("<mask>", 1)
    prefix = prefix.rstrip()
    head = tokenizer(prefix)["input_ids"]
    full = tokenizer(f"{prefix} {illness}{rest}")["input_ids"]
    if full[: len(head)] == head and len(full) > len(head):
        return head, full[len(head) :]
    tail = tokenizer(f" {illness}{rest}", add_special_tokens=False)["input_ids"]
    return head, tail


def neutral_frame(row: dict[str, Any]) -> str:
    """The prior's sentence for a row: its noun phrase in a relative clause, nothing else (names
    take the non-defining ", who has" of the items)."""
    comma = "," if str(row["noun_kind"]).startswith("name") else ""
    return NEUTRAL_FRAME.format(noun_phrase=row["noun_phrase"], comma=comma)


def _score(engine: Any, tokenizer: Any, rows: Sequence[dict[str, Any]], frame_of: Any) -> list:
    """log p(illness + rest | prefix) of each row in ``frame_of(row)``; rows sharing a frame
    share one request."""
    groups: dict[str, list[int]] = defaultdict(list)
    for n, row in enumerate(rows):
        groups[frame_of(row)].append(n)
    requests = []
    for frame, members in groups.items():
        pieces = [_split_ids(tokenizer, frame, rows[n]["illness"]) for n in members]
        requests.append(ChoiceRequest(tuple(pieces[0][0]), tuple(tuple(p[1]) for p in pieces)))
    scores: list[float] = [0.0] * len(rows)
    for members, values in zip(groups.values(), engine.score(requests)):
        for n, v in zip(members, values):
            scores[n] = float(v)
    return scores


def score_chunk(engine: Any, tokenizer: Any, rows: Sequence[dict[str, Any]]) -> list[dict]:
    """Records of a chunk of AQ-27 rows: ``score`` (prior-corrected, see the module docstring),
    ``score_raw`` and ``score_prior``."""
    raw = _score(engine, tokenizer, rows, lambda r: r["frame"])
    prior = _score(engine, tokenizer, rows, neutral_frame)
    return [
        {**{k: r[k] for k in AQ27_KEYS}, "score": a - b, "score_raw": a, "score_prior": b}
        for r, a, b in zip(rows, raw, prior)
    ]


def _frames(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    frames: dict[str, dict[str, Any]] = {}
    for r in records:
        f = frames.setdefault(
            r["frame_id"],
            {
                "item": r["item"],
                "dimension": r["dimension"],
                "noun_phrase": r["noun_phrase"],
                "scores": {"mental": {}, "physical": {}},
            },
        )
        f["scores"][r["illness_type"]][r["illness"]] = r["score"]
    return list(frames.values())


def summarize_aq27(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Wilcoxon (overall, per dimension with Bonferroni), Cronbach's alpha, illness means."""
    frames = _frames(records)
    dims = [d for d in DIMENSIONS if any(f["dimension"] == d for f in frames)]
    by_illness: dict[tuple, list[float]] = defaultdict(list)
    for r in records:
        by_illness[(r["illness_type"], r["illness"])].append(r["score"])
    prior = any("score_prior" in r for r in records)
    measure = (
        "prior-corrected log-likelihood: log p(illness + rest | item) - log p(illness + '.' | "
        "neutral sentence) (higher: the item makes the illness more expected than a neutral "
        "sentence does)"
        if prior
        else "log-likelihood (higher: the model finds the illness more likely)"
    )
    return {
        "measure": measure,
        "n_records": len(records),
        "n_frames": len(frames),
        "reverse_scored_dimensions": sorted({r["dimension"] for r in records if r["reverse"]}),
        **mental_vs_physical(frames, dims),
        "illnesses": {
            f"{t}/{name}": sum(v) / len(v) for (t, name), v in sorted(by_illness.items())
        },
    }


def _f(x: float | None, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}g}" if abs(x) < 1e-3 else f"{x:.{digits}f}"


def _stars(p: float | None) -> str:
    if p is None:
        return "–"
    return "***" if p < 0.001 else "**" if p < 0.01 else "*" if p < 0.05 else "n.s."


def aq27_markdown(summary: dict[str, Any], title: str) -> str:
    """The AQ-27 summary in the layout of Table 2 of Mina et al. 2024, plus the mean differences."""
    o = summary["overall"]
    lines = [
        f"# {title}",
        "",
        "Mental vs physical illness: Wilcoxon signed-rank over sentence frames (item x noun "
        "phrase), per-dimension p-values Bonferroni-corrected; alpha = Cronbach's alpha over the "
        f"mental illnesses. Difference = mean score of mental - physical illnesses; score: "
        f"{summary['measure']}. Positive: mental illnesses more likely in the stigma statement. "
        "Avoidance and help items express willingness (reverse-scored in the AQ-27).",
        "",
        "| Dimension | Mental − physical | Adjusted p | Significance | α | Frames |",
        "|---|---|---|---|---|---|",
        f"| ALL | {_f(o['mean_diff'])} | {_f(o['p'])} | {_stars(o['p'])} | – | {o['n']} |",
    ]
    for dim, r in summary["dimensions"].items():
        lines.append(
            f"| {dim.capitalize()} | {_f(r['mean_diff'])} | {_f(r['p_bonferroni'])} | "
            f"{_stars(r['p_bonferroni'])} | {_f(r['alpha'], 2)} | {r['n']} |"
        )
    lines += ["", "## Mean score per illness", "", "| Type | Illness | Mean |", "|---|---|---|"]
    for key, v in summary["illnesses"].items():
        kind, name = key.split("/", 1)
        lines.append(f"| {kind} | {name} | {_f(v)} |")
    return "\n".join(lines) + "\n"


def pll_chunk(
    model: Any, tokenizer: Any, rows: Sequence[dict[str, Any]], batch_size: int = 256
) -> list[dict[str, Any]]:
    """AQ-27 records scored with :func:`pll_scores` (``score`` per row's sentence)."""
    from scd.eval.benchmarks.stigma.mlm import pll_scores

    enc = tokenizer([r["prompt"] for r in rows])
    words = [enc.word_ids(n) for n in range(len(rows))]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    scores = pll_scores(
        model, enc["input_ids"], words, tokenizer.mask_token_id, pad, batch_size=batch_size
    )
    return [{**{k: r[k] for k in AQ27_KEYS}, "score": s} for r, s in zip(rows, scores)]


class AQ27(StigmaProbe):
    """The AQ-27 questionnaire on a causal LM (prior-corrected log-likelihood) or a masked LM
    (PLL-word-l2r) (``scd eval aq27``)."""

    name = "aq27"
    help = "stigma: AQ-27, mental vs physical illness on a causal or masked LM (Mina et al. 2024)"
    Options = StigmaOptions
    model_kinds = ("causal", "masked")
    table_file = "aq27"

    def scorer(self, task: Any, progress: bool) -> Any:
        if task.kind == "causal":
            engine, fmt = task.model.load(progress)
            return lambda rows: score_chunk(engine, fmt.tokenizer, rows)
        lm, tokenizer, _, batch = task.load_hf()
        return lambda rows: pll_chunk(lm, tokenizer, rows, batch * 8)

    def summarize(self, records: list[dict[str, Any]], task: Any) -> dict[str, Any]:
        scoring = "pll_word_l2r" if task.kind == "masked" else "causal_prior_corrected"
        return {**summarize_aq27(records), "scoring": scoring}

    def markdown(self, summary: dict[str, Any], title: str) -> str:
        return aq27_markdown(summary, title)

    def headline(self, summary: dict[str, Any]) -> dict[str, Any]:
        return {"mean_diff": summary["overall"]["mean_diff"]}

    def describe(self, summary: dict[str, Any]) -> str:
        o = summary["overall"]
        diff = "–" if o["mean_diff"] is None else f"{o['mean_diff']:+.3f}"
        return f"mental - physical {diff} over {o['n']} frames"

    def table(self, runs: dict[str, Any]) -> Table:
        return aq27_table(runs)


def aq27_table(runs: dict[str, Any]) -> Table:
    """AQ-27 runs side by side: per dimension, the mental - physical difference with its
    Bonferroni-corrected Wilcoxon p-value and Cronbach's alpha."""
    summaries = read_summaries(runs, "aq27", probe=True)
    names = list(summaries)
    overall = {n: summaries[n]["overall"] for n in names}
    cells = [["ALL", *(f"{_f(o['mean_diff'])} (p {_f(o['p'])})" for o in overall.values())]]
    rows = [{"run": n, "dimension": "all", "mean_diff": o["mean_diff"], "p": o["p"]}
            for n, o in overall.items()]  # fmt: skip
    for dim in dict.fromkeys(d for s in summaries.values() for d in s["dimensions"]):
        by_run = {n: summaries[n]["dimensions"].get(dim, {}) for n in names}
        cells.append([dim.capitalize(), *(
            f"{_f(c.get('mean_diff'))} (p_bonf {_f(c.get('p_bonferroni'))}, α "
            f"{_f(c.get('alpha'), 2)})" for c in by_run.values())])  # fmt: skip
        rows += [{"run": n, "dimension": dim, **{k: c.get(k) for k in
                  ("mean_diff", "p_bonferroni", "alpha")}} for n, c in by_run.items()]  # fmt: skip
    note = (
        "Cells: mean log-likelihood difference mental − physical (positive: mental illnesses "
        "more likely in the stigma statement), Wilcoxon signed-rank p (per dimension "
        "Bonferroni-corrected over 9 dimensions), Cronbach's α over mental illnesses."
    )
    md = ["## Stigma: AQ-27 mental − physical (aq27)", "", *markdown_table(["", *names], cells)]
    return Table("\n".join([*md, note, ""]), rows, "stigma-aq27")
