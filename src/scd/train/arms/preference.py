"""What the preference methods share (:mod:`scd.train.arms.dpo`, :mod:`scd.train.arms.kto`):
TRL's ``beta``, rows made from each contact prompt's unbiased and biased answers, and the check
that TRL's tokenized rows train what evaluation scores.

With a PEFT adapter and no ``ref_model`` TRL takes the reference from the same model with the
adapter switched off (``trl.trainer.utils.use_adapter(model, None)`` in DPO's
``compute_ref_log_probs`` and KTO's): the untuned base model, with no second copy in memory.

The rows go to TRL rendered as the evaluator scores them, and TRL's tokenized rows are checked
against the evaluator's tokens, as for SFT: the prompt tokens are the evaluator's prompt, the
chosen (desirable) completion starts with the unbiased option's tokens and the rejected
(undesirable) one with the biased option's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from scd.config.options import Options, above_zero, option
from scd.errors import InputError
from scd.train.arms.base import Method, RowsInput

if TYPE_CHECKING:
    from scd.data_gen.contrast import Twin
    from scd.models.formatting import Formatter
    from scd.train.spec import TrainingSpec

__all__ = ["Preference", "PreferenceOptions", "check_preference_tokens"]


@dataclass
class PreferenceOptions(Options):
    beta: float = option(
        0.1,
        "preference methods: the beta of the method's TRL config, whatever its trainer makes "
        "of it -- DPO and KTO: the pull towards the reference model (the base, its adapter "
        "off); a registered method says in its help what it is for it (ORPO: the odds-ratio "
        "weight)",
        check=above_zero,
    )


def _rendered(row: dict[str, Any], formatter: Formatter) -> dict[str, Any]:
    """A preference row as TRL gets it: conversational for chat models (with the template's
    kwargs), the plain prompt text and ``" " + answer`` otherwise -- as :meth:`Formatter.
    sft_example` renders an SFT row."""
    replies = [k for k in ("chosen", "rejected", "completion") if k in row]
    out = {}
    for key in replies:
        example = formatter.sft_example(row["prompt"], row[key])
        out["prompt"], out[key] = example["prompt"], example["completion"]
        if "chat_template_kwargs" in example:
            out["chat_template_kwargs"] = example["chat_template_kwargs"]
    return out


def check_preference_tokens(
    dataset: Any,
    rows: list[dict[str, Any]],
    formatter: Formatter,
    pairs: tuple[tuple[str, str], ...],
    sample: int = 64,
) -> int:
    """Check, on TRL's tokenized rows, that preference training trains what evaluation scores
    (see the module docstring): for each ``(TRL's column, the row's answer key)`` of ``pairs``,
    the column starts with the evaluator's tokens of that answer, after the evaluator's prompt.
    Return the number of rows checked.

    Raises:
        InputError: a mismatch, naming the row and both token sequences.
    """
    decode = formatter.tokenizer.convert_ids_to_tokens
    for i, row in enumerate(rows[:sample]):
        user = next(m["content"] for m in row["prompt"] if m["role"] == "user")
        prompt = formatter.encode([user])[0]
        done = dataset[i]
        for key, answer in pairs:
            want = list(formatter.reply_ids(row[answer]))
            got = list(done[key])
            if list(done["prompt_ids"]) != prompt or got[: len(want)] != want:
                raise InputError(
                    f"preference training would not train what evaluation scores (row "
                    f"{row.get('prompt_id')}, {key}): {decode(got)} after "
                    f"{len(done['prompt_ids'])} prompt tokens; the evaluator scores "
                    f"{decode(want)} after {len(prompt)}"
                )
    return min(sample, len(rows))


class Preference(Method):
    """A preference method on the setting's contact prompts: its rows are its own, made from
    each prompt's unbiased and biased answers; its config gets ``arena.beta``."""

    Options = PreferenceOptions
    own_rows = True
    decided = ("beta",)
    checked: ClassVar[tuple[tuple[str, str], ...]]  # (TRL's tokenized column, the answer key)
    # (row, the answer to prefer, the other) -> its rows (scd.data_gen.arms.write_answer_rows)
    make: ClassVar[Callable[[dict[str, Any], str, str], list[dict[str, Any]]]]
    shuffled: ClassVar[bool] = False  # its rows are shuffled (data.seed), as TRL reads them

    def row_schema(self) -> Any:
        """The Arrow schema of its rows."""
        raise NotImplementedError

    def write_rows(self, inputs: RowsInput, out: Path) -> dict[str, Any]:
        return self.write_method_rows(inputs, out, self.name, ())

    def write_method_rows(
        self, inputs: RowsInput, out: Path, arm: str, twins: Sequence[Twin]
    ) -> dict[str, Any]:
        from scd.data_gen.arms import write_answer_rows

        seed = inputs.data.seed if self.shuffled else None
        schema, sft, prompts = self.row_schema(), inputs.sft, list(inputs.prompts)
        return write_answer_rows(sft, prompts, out, arm, self.make, schema, seed, twins)

    def config_values(self, spec: TrainingSpec) -> dict[str, Any]:
        return {"beta": spec.arena.beta}

    def render(self, data: Any, formatter: Formatter) -> Any:
        return data.select_columns(list(self.columns)).map(
            lambda r: _rendered(r, formatter), desc=f"Formatting {self.name} rows"
        )

    def check_tokens(
        self, dataset: Any, rows: list[dict[str, Any]], formatter: Formatter, spec: TrainingSpec
    ) -> int:
        return check_preference_tokens(dataset, rows, formatter, self.checked, self.check_sample)
