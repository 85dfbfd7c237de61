"""Contrast arms: a training method on the setting's SCD rows with relevance twins beside them
(:mod:`scd.data_gen.contrast`) -- the same templates with a relevant, non-group fact about the
people, the answer the fact warrants as the target (DPO: chosen; KTO: desirable), so that the
tuned model learns to drop the group and keep reading the facts.

``sft-contrast``, ``dpo-contrast`` and ``kto-contrast`` train as ``sft``, ``dpo`` and ``kto`` do
on the same SCD rows; ``arena.contrast_share`` of their training rows are twins (more rows, so
more steps at the same batch size and epochs). The twins come from the training cues, never
from a held-out template of the judgment nor with an evaluation cue's text, so the arena's
judgment columns and gate measure them on templates they were never shown a cue in.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scd.config.options import Options, fraction, option
from scd.errors import InputError
from scd.train.arms.base import Arm, Problem, RowsInput

if TYPE_CHECKING:
    from scd.config.schema import Recipe

__all__ = ["Contrast", "ContrastOptions"]


@dataclass
class ContrastOptions(Options):
    contrast_share: float = option(
        0.25,
        "contrast arms (sft-contrast, dpo-contrast, kto-contrast): the share of their training "
        "rows that are relevance twins, beside the setting's SCD rows (0.25: one twin per three "
        "SCD rows)",
        check=fraction,
    )
    contrast_cues: str | None = option(
        None,
        "contrast arms: a training cues YAML (default: scd's own, three 'against' and three "
        "'for' cues on each of the 15 training templates); no template of the judgment's "
        "held-out ones, no evaluation cue's text",
    )


class Contrast(Arm):
    """A method's rows with twins: each method's module declares its contrast arm (``name``,
    ``help``, ``method``), registered in :mod:`scd.config.arms`."""

    Options = ContrastOptions
    own_rows = True

    def problems(self, recipe: Recipe) -> Iterator[Problem]:
        from scd.data_gen.contrast import load_training_cues
        from scd.train.arms import method_class

        yield from method_class(self.method)().problems(recipe)
        try:
            load_training_cues(recipe.arena.contrast_cues)
        except InputError as err:
            yield "arena.contrast_cues", f"arena.contrast_cues: {err}"

    def write_rows(self, inputs: RowsInput, out: Path) -> dict[str, Any]:
        import pyarrow.parquet as pq

        from scd.data_gen.contrast import twin_count, twin_examples, twins
        from scd.io import read_json
        from scd.models.protocols import training_protocol
        from scd.train.arms import method_class

        options = inputs.arena
        manifest = read_json(inputs.sft / "manifest.json")
        table = pq.read_table(inputs.sft / "train.parquet", columns=["source"])
        scd_rows = table["source"].to_pylist().count("scd")
        n = twin_count(scd_rows, options.contrast_share)
        filters = manifest.get("used", {}).get("train", {})
        rows = twins(n, filters, inputs.data.seed, options.contrast_cues)
        protocol = training_protocol(manifest.get("protocol", "scd"))
        made = twin_examples(rows, protocol)
        return method_class(self.method)().write_method_rows(inputs, out, self.name, made)
