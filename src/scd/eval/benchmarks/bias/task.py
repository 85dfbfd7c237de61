"""Contact prompts put to a causal LM: the work list (a stratified subset, then the
descriptor-free baselines), one record per prompt, bias % over the records.

``OUT/records.jsonl`` has one line per prompt, ``OUT/summary.json`` and ``OUT/tables.md`` the
paper's tables (:mod:`~scd.eval.benchmarks.bias.metrics`); ``OUT/run.json`` pins the
configuration so that a re-run into the same ``OUT`` resumes (:mod:`scd.eval.records`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from scd.config.vocabulary import PROMPT_LABELS
from scd.data_gen.contact import read_baseline, read_prompts
from scd.eval.engines import ChoiceRequest
from scd.eval.sampling import stratified_sample
from scd.eval.tasks import CausalModel, CausalTask
from scd.models.formatting import parse_answer
from scd.models.protocols import PROTOCOLS, PromptProtocol, choose, get_protocol

__all__ = ["STRATA", "BiasTask", "bias_task", "load_work", "stratified_sets"]

ROW_KEYS = ("prompt_id", "set_id", *PROMPT_LABELS)  # what a record keeps of its prompt
STRATA = ("principle", "scenario", "action", "scale", "axis")
TEMPLATE_CELL = STRATA[:4]  # what a descriptor-free baseline prompt shares with its set


def stratified_sets(table: pa.Table, n_prompts: int, seed: int) -> set[str]:
    """Choose whole prompt sets, ~``n_prompts`` descriptor prompts, in proportion to every level.

    Levels are principle > scenario > action > scale > axis (see :mod:`scd.eval.sampling`): each
    level's marginal is within about one set of its share for any ``n_prompts``; the seed picks
    the sets within each stratum and breaks rounding ties.
    """
    cols = {k: table[k].combine_chunks().cast(pa.string()).to_pylist() for k in (*STRATA, "set_id")}
    first: dict[str, int] = {}
    for i, sid in enumerate(cols["set_id"]):
        first.setdefault(sid, i)
    ids = list(first)
    keys = [tuple(cols[k][first[sid]] for k in STRATA) for sid in ids]
    want = max(1, math.ceil(n_prompts / max(1, table.num_rows / len(ids))))
    return {ids[i] for i in stratified_sample(keys, want, seed)}


def load_work(
    prompts: Path | str, limit: int | None, seed: int, sets: Collection[str] | None = None
) -> list[dict[str, Any]]:
    """The ordered work list: descriptor prompts, then the descriptor-free baselines.

    ``sets`` keeps only those prompt sets; ``limit`` then takes a stratified subset of ~N
    descriptor prompts (whole sets). When either narrows the prompts, the baselines are those of
    the templates (principle, scenario, action, scale) the kept prompts use.
    """
    table = read_prompts(prompts)
    if sets is not None:
        table = table.filter(pa.compute.is_in(table["set_id"], value_set=pa.array(sorted(sets))))
    if limit is not None:
        keep = stratified_sets(table, limit, seed)
        table = table.filter(pa.compute.is_in(table["set_id"], value_set=pa.array(sorted(keep))))
    cols = [*ROW_KEYS, "prompt", "instruction", "options", "unbiased_answer", "biased_answer"]
    rows = [{**r, "baseline": False} for r in table.select(cols).to_pylist()]
    baseline = read_baseline(prompts)
    if baseline is not None:
        narrowed = limit is not None or sets is not None
        keys = TEMPLATE_CELL if narrowed else ("scale",)
        used = {tuple(r[k] for k in keys) for r in rows}
        for r in baseline.select(cols).to_pylist():
            if tuple(r[k] for k in keys) in used:
                rows.append({**r, "prompt_id": f"baseline-{r['prompt_id']}", "baseline": True})
    return rows


def _record(
    row: dict[str, Any],
    chosen: str | None,
    logprobs: list[float | None] | None,
    generated: str | None,
) -> dict[str, Any]:
    probs = None
    if logprobs is not None:
        logprobs = [None if x is None else float(x) for x in logprobs]
    if logprobs is not None and None not in logprobs:
        top = max(logprobs)
        weights = [math.exp(x - top) for x in logprobs]
        probs = [w / sum(weights) for w in weights]
    rec = {k: row[k] for k in ROW_KEYS}
    rec.update(
        baseline=row["baseline"],
        options=list(row["options"]),
        unbiased_answer=row["unbiased_answer"],
        biased_answer=row["biased_answer"],
        chosen=chosen,
        option_logprobs=logprobs,
        option_probs=probs,
        generated=generated,
        biased=chosen == row["biased_answer"],
        unparsed=chosen is None,
    )
    return rec


def bias_task(model: CausalModel, options: Any, identity: Callable[[], dict[str, Any]]) -> BiasTask:
    """The task of ``options`` (:class:`~scd.eval.benchmarks.bias.BiasOptions`), pinning the
    result's ``identity()`` (:meth:`~scd.eval.benchmarks.base.Benchmark.identity`, taken once the
    prompts have been read): ``limit`` is a number of descriptor prompts (a stratified subset of
    whole sets, seeded by ``seed``); ``sets`` restricts the prompts to those set ids first
    (``scd run`` evaluates a tuned model on the held-out part of the base model's subset).
    Baselines come on top, see :func:`load_work`."""
    o = options
    work = load_work(o.prompts, o.limit, o.seed, o.sets)
    config = {**identity(), "n_items": len(work)}
    protocol = get_protocol(o.protocol)
    rule = o.rule or protocol.rule
    return BiasTask(
        config, work, o.chunk_size, model, o.mode, o.max_new_tokens, o.denominator, protocol, rule
    )


@dataclass
class BiasTask(CausalTask):
    """Contact prompts put to a causal LM: the option it prefers (choice) or answers (generate)."""

    mode: str = "choice"
    max_new_tokens: int = 8
    denominator: str = "all"
    protocol: PromptProtocol = PROTOCOLS["scd"]
    rule: str = "sum"
    name = "scd eval bias"
    unit = "prompt"

    def score(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        p, fmt = self.protocol, self.protocol.formatter(self.fmt)
        ids = p.prompt_ids(self.fmt, rows)
        chats = [fmt.conversation(p.user_text(r)) for r in rows]  # what a chat API is sent
        if self.mode == "generate":
            texts = self.engine.generate(ids, self.max_new_tokens, messages=chats)
            return [_record(r, parse_answer(t, r["options"]), None, t) for r, t in zip(rows, texts)]
        options = [p.option_ids(self.fmt, r["options"]) for r in rows]
        requests = [
            ChoiceRequest(tuple(x), o, c, tuple(r["options"]))
            for x, o, c, r in zip(ids, options, chats, rows)
        ]
        scores = self.engine.score(requests)
        return [
            _record(r, choose(r["options"], s, o, self.rule), s, None)
            for r, s, o in zip(rows, scores, options)
        ]

    @property
    def recorded(self) -> dict[str, Any]:
        """The engine (:class:`CausalTask`'s), and the protocol and rule every summary names,
        also where run.json leaves them out (scd's own, pinned only when changed)."""
        return {**super().recorded, "protocol": self.protocol.name, "rule": self.rule}

    def summarize(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        from scd.eval.benchmarks.bias.metrics import summarize

        return summarize(records, denominator=self.denominator)

    def render(self, summary: dict[str, Any]) -> dict[str, str]:
        from scd.eval.benchmarks.bias.metrics import tables_markdown
        from scd.eval.benchmarks.tables import evaluated

        title = f"Bias: {evaluated(summary)} (protocol {self.protocol.name}, rule {self.rule})"
        return {"tables.md": tables_markdown(summary, title=title)}
