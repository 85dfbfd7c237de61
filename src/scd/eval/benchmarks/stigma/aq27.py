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

**In-vocabulary filter** (option ``in_vocabulary``; by default on for masked LMs, off for causal
LMs). Mina et al. 2024 (section 3.1) examine the illnesses "that are present in the models'
vocabulary": a masked LM predicts one token at its one mask, so an illness of two tokens cannot
be scored as the others are. A causal LM scores the whole sentence, every word of the illness
included, so the filter would drop illnesses for no reason there; it is off for them unless
asked for. Here an illness is in a
model's vocabulary when every word of it (split at spaces), as it appears in the sentence --
after a space, so that a BPE vocabulary's `` anxiety`` and a SentencePiece one's ``▁anxiety``
count -- is one token of the model's tokenizer and not its unknown token. Concretely
(:func:`in_vocabulary`): appending `` WORD`` to the text read so far (from ``"who has"``, the
text before the slot in the items) adds exactly one token, not the unknown token, and leaves the
tokens before it as they were. "Alzheimer's" is two tokens (`` Alzheimer`` ``'s``) to a
byte-level BPE, so it is out even where " Alzheimer" is in; "a cold" is in when " a" and
" cold" are. The filter runs when the task is built: dropped illnesses are never scored, the
pinned configuration records the option and the kept and dropped illnesses (a resume never mixes
lists), and the summary lists them per type (``illnesses_kept``, ``illnesses_dropped``). A type
that loses an illness to the filter and keeps fewer than 2 is an error (set ``in_vocabulary``
false).

Figures (:mod:`~scd.eval.benchmarks.stigma.aq27_figures`, ``scd report aq27`` and the run
report): Figure 1 (box plots of the records' scores, mental vs physical, overall and per
dimension) and Figure 2 (the mean differences per dimension), one panel or bar group per run.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scd.config.options import option
from scd.config.vocabulary import AQ27_COLUMNS
from scd.errors import InputError, first_line
from scd.eval.benchmarks.stigma.aq27_report import aq27_markdown, aq27_table
from scd.eval.benchmarks.stigma.common import StigmaOptions, StigmaProbe, StigmaTask, model_kind
from scd.eval.benchmarks.stigma.stats import mental_vs_physical
from scd.eval.benchmarks.tables import Table
from scd.eval.engines import ChoiceRequest
from scd.eval.tasks import CausalModel

__all__ = [
    "AQ27",
    "AQ27_KEYS",
    "AQ27Options",
    "DIMENSIONS",
    "NEUTRAL_FRAME",
    "VOCABULARY_CONTEXT",
    "aq27_markdown",
    "in_vocabulary",
    "neutral_frame",
    "score_chunk",
    "summarize_aq27",
]

NEUTRAL_FRAME = "This is {noun_phrase}{comma} who has <mask>."  # the prior's context
VOCABULARY_CONTEXT = "who has"  # the text before the slot, for the in-vocabulary filter

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


@dataclass
class AQ27Options(StigmaOptions):
    """The AQ-27 probe's options."""

    in_vocabulary: bool | None = option(
        None,
        "score only the illnesses whose every word is one token of the model's tokenizer "
        "(Mina et al. 2024, section 3.1); default: on for masked LMs (one mask, one token), off "
        "for causal LMs (they score whole words)",
    )


def in_vocabulary(tokenizer: Any, illness: str) -> bool:
    """Whether every word of ``illness``, read after :data:`VOCABULARY_CONTEXT` as in the items,
    is one token of ``tokenizer`` and not its unknown token (the module docstring)."""
    text = VOCABULARY_CONTEXT
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    for word in illness.split():
        text = f"{text} {word}"
        more = list(tokenizer(text, add_special_tokens=False)["input_ids"])
        if len(more) != len(ids) + 1 or more[: len(ids)] != ids:
            return False
        if tokenizer.unk_token_id is not None and more[-1] == tokenizer.unk_token_id:
            return False
        ids = more
    return True


def _illness_lists(task: StigmaTask, options: AQ27Options) -> tuple[dict, dict]:
    """The prompts' illnesses per type split into those kept and those dropped by the filter.

    Raises:
        InputError: the tokenizer cannot be loaded, or the filter leaves a type with fewer than
            2 illnesses.
    """
    names: dict[str, dict[str, None]] = {}
    for r in task.work:
        names.setdefault(r["illness_type"], {})[r["illness"]] = None
    if not options.in_vocabulary:
        return {t: list(v) for t, v in names.items()}, {t: [] for t in names}
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(task.model.model)
    except (OSError, ValueError) as err:
        raise InputError(
            f"cannot load its tokenizer (for in_vocabulary): {first_line(err)}",
            key="model",
            value=task.model.model,
        ) from None
    kept, dropped = {}, {}
    for kind, ills in names.items():
        kept[kind] = [n for n in ills if in_vocabulary(tokenizer, n)]
        dropped[kind] = [n for n in ills if n not in kept[kind]]
        if dropped[kind] and len(kept[kind]) < 2:
            raise InputError(
                f"{len(kept[kind])} of the {len(ills)} {kind} illnesses of the prompts are in the "
                f"model's vocabulary ({', '.join(kept[kind]) or 'none'}), 2 are needed; set "
                "in_vocabulary false to score every illness",
                key="in_vocabulary",
                value="true",
            )
    return kept, dropped


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
    Options = AQ27Options
    model_kinds = ("causal", "masked")
    table_file = "aq27"

    def task(self, model: CausalModel, options: AQ27Options) -> StigmaTask:
        """The probe's task on the illnesses the in-vocabulary filter keeps (module docstring;
        the filter's default resolved by the model's kind, and pinned so)."""
        if options.in_vocabulary is None:
            from scd.models import resolve_model

            masked = model_kind(resolve_model(model.model)) == "masked"
            options = dataclasses.replace(options, in_vocabulary=masked)
        task = super().task(model, options)
        kept, dropped = _illness_lists(task, options)
        keep = {(kind, name) for kind, names in kept.items() for name in names}
        task.work = [r for r in task.work if (r["illness_type"], r["illness"]) in keep]
        task.config.update(n_items=len(task.work), illnesses_kept=kept, illnesses_dropped=dropped)
        return task

    def scorer(self, task: Any, progress: bool) -> Any:
        if task.kind == "causal":
            engine, fmt = task.model.load(progress)
            return lambda rows: score_chunk(engine, fmt.tokenizer, rows)
        lm, tokenizer, _, batch = task.load_hf()
        return lambda rows: pll_chunk(lm, tokenizer, rows, batch * 8)

    def summarize(self, records: list[dict[str, Any]], task: Any) -> dict[str, Any]:
        scoring = "pll_word_l2r" if task.kind == "masked" else "causal_prior_corrected"
        lists = {
            k: task.config[k] for k in ("in_vocabulary", "illnesses_kept", "illnesses_dropped")
        }
        return {**summarize_aq27(records), "scoring": scoring, **lists}

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
