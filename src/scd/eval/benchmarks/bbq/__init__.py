"""``scd eval bbq``: BBQ accuracy and bias scores (Parrish et al., 2022; the SCD paper's Table 15).

Each item is one user message (chat template / system prompt as in
:mod:`scd.models.formatting`)::

    {context}
    {question}
    A. {ans0}
    B. {ans1}
    C. {ans2}
    Answer with the text of one option.

and the three answer texts are scored in choice mode as the assistant's reply (``--mode
generate``: the message asks for the option's letter, and the written answer is parsed,
:func:`~scd.eval.benchmarks.bbq.data.parse_letter`; ``--permute-options K``: the answers listed in
K orders, :func:`~scd.eval.benchmarks.bbq.metrics.order_consistency`). Here: the options
(:class:`BBQOptions`) and the benchmark (:class:`BBQ`: its inputs, task, table, arena and report
section). Scoring the items: :mod:`~scd.eval.benchmarks.bbq.task`; loading, bias labels and the
prompt text: :mod:`~scd.eval.benchmarks.bbq.data`; the numbers and Table 15:
:mod:`~scd.eval.benchmarks.bbq.metrics`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from scd.config.options import Pin, option, positive
from scd.errors import InputError
from scd.eval.benchmarks.base import Benchmark, BenchmarkOptions
from scd.eval.benchmarks.bbq.columns import BBQ_COLUMNS
from scd.eval.benchmarks.bbq.task import BBQTask
from scd.eval.benchmarks.tables import Table, read_summaries, save_table
from scd.eval.tasks import CausalModel
from scd.io import looks_local

__all__ = ["BBQ", "BBQOptions", "BBQTask"]


@dataclass
class BBQOptions(BenchmarkOptions):
    """BBQ: ``scd eval bbq`` flags, a recipe's ``eval.bbq`` keys."""

    data: list[str] | str | None = option(
        None,
        "BBQ directory of <Category>.jsonl, JSONL files, or a Hub dataset id (default: "
        "$SCD_DATA_DIR/bbq/data, the categories asked for fetched at BBQ's pinned commit and "
        "verified when missing)",
    )
    categories: list[str] | None = option(None, "categories (default: all present)")
    limit: int | None = option(None, "a stratified, seeded subset of ~N items", check=positive)
    seed: int = option(0, "seed of the --limit subset")
    permute_options: int = option(
        1,
        "list each item's answers in K orders (the first as given; at most 6) and report how "
        "often the chosen answer stays the same; the headline numbers stay the first order's",
        check=lambda k: None if 1 <= k <= 6 else "expected 1 to 6 (three answers have 6 orders)",
        pin=Pin.CHANGED,
    )

    mode: Literal["choice", "generate"] = option(
        "choice",
        "choice: the answer text of highest log-probability; generate: the model "
        "writes the letter of its answer, parsed (the BBQ a chat API can take)",
        pin=Pin.CHANGED,
    )
    max_new_tokens: int = option(
        16, "generate mode: tokens to generate", check=positive, pin=Pin.CHANGED
    )
    format: Literal["scd", "lm-eval"] = option(
        "scd",
        "scd: each item as one user turn with its three answers; lm-eval: lm-evaluation-harness "
        "0.4.13's bbq_multiple_choice (its prompt, its twelve choices and metrics, computed by "
        "its own code: needs scd[lm-eval])",
        pin=Pin.CHANGED,
        group="format",
    )
    chat_template: bool = option(
        True,
        "put the prompt through the model's chat template (false: plain text, as lm-eval reads "
        "it without --apply_chat_template)",
        pin=Pin.CHANGED,
        group="format",
    )

    def __post_init__(self) -> None:
        if isinstance(self.data, (list, tuple)):  # paths as text (pinned in run.json)
            self.data = [str(d) for d in self.data] if len(self.data) > 1 else str(self.data[0])
        elif self.data is not None:
            self.data = str(self.data)
        if self.categories:  # "Age,Religion" as well as "Age Religion"
            self.categories = [c.strip() for x in self.categories for c in x.split(",") if c]

    def problems(self) -> Iterator[tuple[str, str]]:
        yield from super().problems()
        if self.format == "lm-eval" and (self.mode != "choice" or self.permute_options != 1):
            yield "format", "lm-eval scores its twelve choices (mode choice, permute_options 1)"
        if not self.chat_template and self.format != "lm-eval":
            yield "chat_template", "false goes with format lm-eval (scd's own BBQ is a chat turn)"
        if self.enabled and not self.data:
            yield (
                "data",
                (
                    "needed with eval.bbq.enabled (the data/ directory of "
                    "github.com/nyu-mll/BBQ, or a Hub dataset id with BBQ's original "
                    "schema)"
                ),
            )

    def effective(self) -> BBQOptions:
        """``max_new_tokens`` None in choice mode, where no text is generated."""
        tokens = self.max_new_tokens if self.mode == "generate" else None
        return dataclasses.replace(self, max_new_tokens=tokens)


def _local_or_hub(text: str) -> bool:
    parts = text.split("/")
    hub = len(parts) == 2 and all(parts) and not text.startswith((".", "~")) and "." not in parts[1]
    return hub or Path(text).exists()


class BBQ(Benchmark):
    name = "bbq"
    dataset = "bbq"
    help = "BBQ accuracy and bias scores (Parrish et al.)"
    Options = BBQOptions
    base_label = "Without FT"  # the paper's Table 15
    arena_columns = BBQ_COLUMNS
    arena_reading = (
        'BBQ\'s disambiguated accuracy falling, or its "unknown" rate rising on disambiguated '
        "items, is over-correction."
    )

    def dataset_files(self, options: BBQOptions) -> list[str] | None:
        """The categories asked for (every category of BBQ without ``categories``)."""
        cats = options.categories
        return None if not cats else [f"data/{c}.jsonl" for c in cats]

    def dataset_inputs(self, options: BBQOptions) -> dict[str, Path]:
        """The category files of a local BBQ directory that ``options`` read (none for files or
        a Hub id given otherwise)."""
        from scd.eval.benchmarks.bbq.data import CATEGORIES

        folder = Path(options.data) if isinstance(options.data, str) else None
        if folder is None or not folder.is_dir():
            return {}
        cats = options.categories or [c for c in CATEGORIES if (folder / f"{c}.jsonl").is_file()]
        return {c: folder / f"{c}.jsonl" for c in cats if (folder / f"{c}.jsonl").is_file()}

    def check_inputs(self, options: BBQOptions) -> None:
        data = options.data
        if isinstance(data, str) and not _local_or_hub(data):
            raise InputError(f"eval.bbq.data: {data} is neither an existing path nor a Hub id")
        if isinstance(data, str) and not Path(data).exists():
            if looks_local(data):  # data/bbq where data/ exists: a missing path, not a Hub id
                raise InputError("no such directory or file", key="eval.bbq.data", value=data)
            from scd.hub import require_hub_dataset

            require_hub_dataset(data, key="eval.bbq.data")  # asked once, now
        elif data:  # local files: read now (a second), not after hours of training
            from scd.eval.benchmarks.bbq.data import load_bbq

            try:
                load_bbq(data, options.categories)
            except InputError as err:
                raise InputError(err.render("eval.bbq.data") if err.key else str(err)) from None

    def task(self, model: CausalModel, options: BBQOptions) -> BBQTask:
        from scd.eval.benchmarks.bbq.data import load_bbq, stratified_subset

        o = options
        work = load_bbq(o.data, o.categories)
        if o.limit is not None:
            work = stratified_subset(work, o.limit, o.seed)
        digest = hashlib.sha256()
        for r in work:
            digest.update(json.dumps(r, sort_keys=True, ensure_ascii=False).encode() + b"\n")
        config = {
            **self.identity(o, model.model, model.adapter, model.spec),
            "n_items": len(work),
            "items_sha256": digest.hexdigest(),
        }
        return BBQTask(config, work, o.chunk_size, model)

    def headline(self, summary: dict[str, Any]) -> dict[str, Any]:
        o = summary["overall"]
        return {"accuracy": o["accuracy"]["accuracy"], "s_dis": o["s_dis"], "s_amb": o["s_amb"]}

    def describe(self, summary: dict[str, Any]) -> str:
        acc = summary["overall"]["accuracy"]
        return f"BBQ accuracy {acc['accuracy']:.3f} over {acc['n']:,} items"

    def table(self, runs: dict[str, Path | str]) -> Table:
        from scd.eval.benchmarks.bbq.sections import table15

        return table15(runs)

    def arena(self, result: Path, base: Path, items: Path) -> dict[str, Any]:
        """Accuracies, unknown rates, bias scores with bootstrap intervals and a McNemar test of
        correctness against the base model (:func:`~scd.eval.benchmarks.bbq.arena.bbq_arena`)."""
        from scd.eval.benchmarks.bbq.arena import bbq_arena

        return bbq_arena(result, base, items)

    def report(self, layout: Any, tables: Path, figures: dict[str, bytes]) -> list[str]:
        """Table 15 and a figure of per-category bars."""
        import pandas as pd

        from scd.eval.benchmarks.bbq.figures import bbq_bars_png
        from scd.eval.benchmarks.captions import FIGURE

        runs = self.runs(layout)
        table = self.table(runs)
        save_table(tables, table)
        bars = [
            {"category": cat, "model": name, **_bars(block)}
            for name, s in read_summaries(runs, "BBQ").items()
            for cat, block in s["by_category"].items()
        ]
        items = {r["n"] for r in table.rows if r.get("category") == "All"}  # one size per model
        n_items, cats = (
            max(items, default=0),
            len({r["category"] for r in table.rows if "category" in r}) - 1,
        )
        figures["bbq"] = bbq_bars_png(
            pd.DataFrame(bars),
            title=f"BBQ per category ({n_items:,} items, {cats} of 11 categories)",
        )
        caption = (
            f"*{FIGURE}. BBQ per category and model, on a stratified subset of {n_items:,} items "
            f"of the {cats} categories present: accuracy on ambiguous and disambiguated contexts "
            "(top) and the bias scores s_AMB and s_DIS (bottom; 0 = unbiased, +1 = always the "
            "stereotyped answer, -1 = always the other one).*"
        )
        return [table.markdown, "", "{{figure:bbq}}", "", caption, ""]


def _bars(block: dict[str, Any]) -> dict[str, float]:
    def value(x: Any) -> float:
        return float("nan") if x is None else float(x)

    def acc(key: str) -> float:
        return value(block[key]["accuracy"] if block.get(key) else None)

    return {
        "accuracy_ambig": acc("accuracy_ambiguous"),
        "accuracy_disambig": acc("accuracy_disambiguated"),
        "bias_ambig": value(block["s_amb"]),
        "bias_disambig": value(block["s_dis"]),
    }
