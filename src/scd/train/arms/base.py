"""What an arm of the arena is (:class:`Arm`), and a training method (:class:`Method`): the units
that ``arms:``, ``scd train --method`` and ``scd run`` loop over, registered by name in
:mod:`scd.config.arms` (the built-in ones by :mod:`scd.train.arms`).

An arm says what it compares with the base model: nothing (the base model itself), a system
prompt, or an adapter that a method trains on rows -- the setting's SFT rows, or rows the arm
makes from them. A method names TRL's config and trainer classes, the columns of the rows it
reads, how those rows reach TRL rendered as the evaluator scores them, and how TRL's tokenized
rows are checked against the evaluator's tokens; :func:`scd.train.method_trainer.build_trainer`
does the rest, the same for every method. Adding one: docs/ARCHITECTURE.md, "Add an arm".
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from scd.config.registry import load_object

if TYPE_CHECKING:
    from scd.config.schema import DataSpec, Recipe
    from scd.data_gen.contrast import Twin
    from scd.models.formatting import Formatter
    from scd.train.spec import TrainingSpec

__all__ = ["Arm", "Method", "RowsInput"]

Problem = tuple[str, str]  # (recipe key, what is wrong), as scd.config.checks reports them


@dataclass(frozen=True)
class RowsInput:
    """What an arm's own rows are made from: a setting's SFT data (``train.parquet``,
    ``eval.parquet``, ``manifest.json``), the prompt sets its rows were drawn from, the
    recipe's ``data`` section and its ``arena`` section (the arms' own keys; None where no arm
    reads them: ``scd train``)."""

    sft: Path
    prompts: tuple[Path, ...]
    data: DataSpec
    arena: Any = None


class Arm:
    """One arm of the arena. Subclasses set the class attributes and override what applies."""

    name: ClassVar[str]  # arms: [<name>], its rows in the arena table
    help: ClassVar[str]  # what it is, in a line (the arena table's "what" column)
    Options: ClassVar[type | None] = None  # its keys of the recipe's arena: section
    method: ClassVar[str | None] = None  # the method it trains an adapter with (None: none)
    own_rows: ClassVar[bool] = False  # it trains on rows it makes (write_rows), not the SFT rows
    steers: ClassVar[bool] = False  # it adds a steering vector it makes (scd.eval.steering)
    erases: ClassVar[bool] = False  # it applies a concept eraser it fits (scd.eval.erasure)

    def problems(self, recipe: Recipe) -> Iterator[Problem]:
        """What in ``recipe`` this arm cannot run with (checked before any work)."""
        yield from ()

    def system_prompt(self, recipe: Recipe) -> str | None:
        """The system message it evaluates the base model with (None: the engine's)."""
        return None

    def write_rows(self, inputs: RowsInput, out: Path) -> dict[str, Any]:
        """Write its training rows into ``out`` (``train.parquet``, ``eval.parquet``,
        ``manifest.json``, atomically) and return the manifest; for an arm with ``own_rows``."""
        raise NotImplementedError(f"the {self.name} arm makes no rows of its own")


class Method(Arm):
    """A training method: TRL's config and trainer classes (``"module:Class"``, imported when
    training), the rows it reads and how they reach TRL. As an arm it trains on the setting's
    prompts (its own rows when ``own_rows``)."""

    config_class: ClassVar[str]  # e.g. "trl:DPOConfig"
    trainer_class: ClassVar[str]  # e.g. "trl:DPOTrainer"
    columns: ClassVar[tuple[str, ...]]  # the columns of its rows that TRL reads
    decided: ClassVar[tuple[str, ...]] = ()  # keys of TRL's config it sets (not recipe keys)
    check_sample: ClassVar[int] = 64  # rows whose TRL tokens are checked against the evaluator's
    padding_free: ClassVar[bool] = False  # TRL's trainer can batch its rows without pad tokens

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            cls.method = cls.name  # as an arm, it trains with itself

    def config(self) -> type:
        """TRL's config class of the method."""
        return load_object(self.config_class)

    def trainer(self) -> type:
        """TRL's trainer class of the method."""
        return load_object(self.trainer_class)

    def config_values(self, spec: TrainingSpec) -> dict[str, Any]:
        """What the method sets in TRL's config beyond the recipe's ``train`` keys (its options,
        ``spec.arena.beta`` ...). Default: nothing."""
        return {}

    def write_method_rows(
        self, inputs: RowsInput, out: Path, arm: str, twins: Sequence[Twin]
    ) -> dict[str, Any]:
        """Write arm ``arm``'s rows of this method into ``out``: those it trains on (the
        setting's SFT rows, or its own made from them), with ``twins`` (relevance twins:
        :mod:`scd.data_gen.contrast`) joining the training part in the same shape -- what a
        contrast arm trains on (:mod:`scd.train.arms.contrast`)."""
        raise NotImplementedError(f"the {self.name} method takes no twins")

    def render(self, data: Any, formatter: Formatter) -> Any:
        """The rows (a ``datasets.DatasetDict`` of :attr:`columns`) as TRL gets them, rendered
        as the evaluator scores them (:class:`~scd.models.formatting.Formatter`)."""
        raise NotImplementedError

    def check_tokens(
        self, dataset: Any, rows: list[dict[str, Any]], formatter: Formatter, spec: TrainingSpec
    ) -> int:
        """Check that TRL's tokenized ``dataset`` trains what evaluation scores, on the first
        raw ``rows`` (``spec``: the run's training spec); return how many rows were checked.

        Raises:
            InputError: a mismatch, naming the row and both token sequences.
        """
        raise NotImplementedError
