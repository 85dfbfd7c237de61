"""Masked-LM probes: fill-mask with an attitude lexicon (Mei et al. 2023) and PLL scoring
(Mina et al. 2024).

Fill-mask (Mei et al. 2023, section 4.3): the ``top_k`` (default 50) predictions of the
``fill-mask`` pipeline for each SDS statement are looked up in an attitude lexicon (a CSV
``word,attitude`` with attitudes positive / negative / neutral / irrelevant; case-insensitive,
surrounding space ignored). ``p_negative = neg / (pos + neg + neu)`` of summed probabilities;
irrelevant and unrated words are dropped. Each record also keeps ``topk_mass`` (probability of the
k predictions) and ``rated_share`` (the share of that mass the lexicon rates, irrelevant words
included): a low share means the lexicon does not fit the model's vocabulary.

The lexicon: ``--lexicon`` if given; else the 445 words the authors annotated when the data
directory holds them (``$SCD_DATA_DIR/stigma/mlm_word_attitudes.csv``, read off their
``word_ratings.pdf``; reference data, never shipped); else scd's own packaged 64-word
likely/unlikely list. The chosen file and its sha256 are pinned in the run configuration (a
resumed run never mixes lexicons); ``summary.json`` says which (``lexicon_source``) and
``tables.md`` names it.

XLNet (XLNet-large is one of the six MLMs of Mei et al.) has no ``fill-mask`` pipeline; its top-k
come from :mod:`~scd.eval.benchmarks.stigma.xlnet` and are scored with the same lexicon.

PLL (Mina et al. 2024, section 3.1): the PLL-word-l2r score of Kauf & Ivanova (2023), the metric
Mina et al. used through minicons. Every token is predicted with itself and the tokens to its right
*within the same word* masked; the sentence score is the sum of these log-probabilities. Words come
from the fast tokenizer's ``word_ids``. It is implemented here (a dozen lines, tested against a
naive computation) rather than taken from minicons, to keep the dependency set small.
"""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

from scd.config.options import option, positive
from scd.errors import InputError
from scd.eval.benchmarks.stigma.common import StigmaOptions, StigmaProbe, StigmaTask
from scd.eval.benchmarks.stigma.sds import RECORD_KEYS
from scd.eval.benchmarks.stigma.stats import ATTITUDES, p_negative
from scd.eval.benchmarks.stigma.xlnet import xlnet_fill_mask
from scd.eval.tasks import CausalModel

__all__ = [
    "MLM",
    "AUTHORS_LEXICON",
    "DEFAULT_LEXICON",
    "Lexicon",
    "choose_lexicon",
    "fill_mask_chunk",
    "lexicon_records",
    "load_lexicon",
    "pll_scores",
    "xlnet_chunk",
]

DEFAULT_LEXICON = "likely_unlikely_lexicon.csv"
AUTHORS_LEXICON = Path("stigma", "mlm_word_attitudes.csv")  # under scd.io.data_dir()
TOP_RECORDED = 10


def _default_lexicon() -> Path:
    return Path(str(files("scd.eval.benchmarks.stigma") / DEFAULT_LEXICON))


@dataclass(frozen=True)
class Lexicon:
    """The lexicon a run uses: its file, where it came from (``given``, ``authors`` or
    ``packaged``), the name pinned in the run configuration, and one line for the tables."""

    path: Path
    source: str
    pinned: str
    note: str


def choose_lexicon(given: Path | str | None) -> Lexicon:
    """``given`` (``--lexicon``); else the authors' 445 words under :func:`scd.io.data_dir`;
    else the packaged list (module docstring)."""
    from scd.io import data_dir

    if given is not None:
        return Lexicon(Path(given), "given", str(given), f"{given} (--lexicon)")
    authors = data_dir() / AUTHORS_LEXICON
    if authors.is_file():
        note = f"the words annotated by Mei et al. 2023 ({authors})"
        return Lexicon(authors, "authors", str(authors), note)
    note = (
        f"scd's packaged likely/unlikely list ({DEFAULT_LEXICON}); the authors' 445 annotated "
        f"words were not found under {authors.parent} ({AUTHORS_LEXICON.name})"
    )
    return Lexicon(_default_lexicon(), "packaged", DEFAULT_LEXICON, note)


def load_lexicon(path: Path | str | None = None) -> dict[str, str]:
    """Read a ``word,attitude`` CSV into ``{lowercased word: attitude}``.

    Raises:
        InputError: the file is missing or unreadable, lacks a column, has an unknown attitude,
            or rates one word (case-insensitively) with two different attitudes.
    """
    path = Path(path) if path is not None else _default_lexicon()

    def bad(detail: str) -> InputError:
        return InputError(detail, key="lexicon", value=path)

    try:
        with path.open(encoding="utf-8-sig", newline="") as fh:
            reader = csv.DictReader(fh)
            fields = [f.strip() for f in reader.fieldnames or []]
            if "word" not in fields or "attitude" not in fields:
                raise bad(f"expected columns word,attitude; found {','.join(fields)}")
            rows = [{(k or "").strip(): (v or "").strip() for k, v in r.items()} for r in reader]
    except OSError as err:
        raise bad(f"cannot read ({err.strerror or err})") from None
    lexicon: dict[str, str] = {}
    for n, row in enumerate(rows, start=2):
        word, attitude = row["word"].lower(), row["attitude"].lower()
        if not word or attitude not in ATTITUDES:
            raise bad(
                f"line {n}: attitude {row['attitude']!r} of {row['word']!r}; "
                f"expected a word and one of {', '.join(ATTITUDES)}"
            )
        if lexicon.get(word, attitude) != attitude:
            raise bad(f"line {n}: {word!r} is rated twice, differently")
        lexicon[word] = attitude
    if not lexicon:
        raise bad("no rated words")
    return lexicon


def fill_mask_chunk(
    pipe: Any, rows: Sequence[dict[str, Any]], lexicon: dict[str, str], batch_size: int
) -> list[dict[str, Any]]:
    """Records of a chunk of SDS rows scored with a ``fill-mask`` pipeline (see module doc)."""
    mask = pipe.tokenizer.mask_token
    texts = [r["prompt"].replace("<mask>", mask) for r in rows]
    outputs = pipe(texts, batch_size=batch_size)
    if len(texts) == 1 and outputs and isinstance(outputs[0], dict):
        outputs = [outputs]
    return lexicon_records(rows, outputs, lexicon)


def lexicon_records(
    rows: Sequence[dict[str, Any]],
    outputs: Sequence[Sequence[dict[str, Any]]],
    lexicon: dict[str, str],
) -> list[dict[str, Any]]:
    """Records of SDS rows from their top-k predictions (``token_str``, ``score``; as the
    ``fill-mask`` pipeline returns them) looked up in ``lexicon`` (module docstring)."""
    records = []
    for row, preds in zip(rows, outputs):
        mass = dict.fromkeys(ATTITUDES, 0.0)
        for p in preds:
            attitude = lexicon.get(p["token_str"].strip().lower())
            if attitude:
                mass[attitude] += float(p["score"])
        total = sum(float(p["score"]) for p in preds)
        records.append(
            {
                **{k: row[k] for k in RECORD_KEYS},
                "p_negative": p_negative(mass),
                "mass": mass,
                "topk_mass": total,
                "rated_share": sum(mass.values()) / total if total > 0 else 0.0,
                "top": [[p["token_str"].strip(), float(p["score"])] for p in preds[:TOP_RECORDED]],
            }
        )
    return records


def xlnet_chunk(
    model: Any,
    tokenizer: Any,
    rows: Sequence[dict[str, Any]],
    lexicon: dict[str, str],
    top_k: int,
    batch_size: int,
) -> list[dict[str, Any]]:
    """Records of a chunk of SDS rows on XLNet (:func:`~.xlnet.xlnet_fill_mask`)."""
    texts = [r["prompt"].replace("<mask>", tokenizer.mask_token) for r in rows]
    return lexicon_records(
        rows, xlnet_fill_mask(model, tokenizer, texts, top_k, batch_size), lexicon
    )


def _variants(word_ids: Sequence[int | None]) -> list[tuple[int, list[int]]]:
    """(scored position, positions to mask) for every non-special token (PLL-word-l2r)."""
    targets = [i for i, w in enumerate(word_ids) if w is not None]
    return [(i, [j for j in targets if j >= i and word_ids[j] == word_ids[i]]) for i in targets]


def pll_scores(
    model: Any,
    input_ids: Sequence[Sequence[int]],
    word_ids: Sequence[Sequence[int | None]],
    mask_id: int,
    pad_id: int,
    batch_size: int = 256,
) -> list[float]:
    """PLL-word-l2r of tokenized sentences (special tokens have ``word_ids`` None).

    For each scored token i of word w, the input has token i and the tokens of w to its right
    masked; a sentence's score is the sum of ``log p(token_i)`` at position i. The masked
    variants of all sentences are padded and run in batches of ``batch_size``.
    """
    import torch

    with torch.inference_mode():
        jobs = [(n, i, m) for n, w in enumerate(word_ids) for i, m in _variants(w)]
        scores = [0.0] * len(input_ids)
        device = next(model.parameters()).device
        for lo in range(0, len(jobs), batch_size):
            part = jobs[lo : lo + batch_size]
            width = max(len(input_ids[n]) for n, _, _ in part)
            ids = torch.full((len(part), width), pad_id, dtype=torch.long)
            attn = torch.zeros((len(part), width), dtype=torch.long)
            for row, (n, _, masked) in enumerate(part):
                ids[row, : len(input_ids[n])] = torch.tensor(list(input_ids[n]))
                attn[row, : len(input_ids[n])] = 1
                ids[row, masked] = mask_id
            logits = model(input_ids=ids.to(device), attention_mask=attn.to(device)).logits
            rows = torch.arange(len(part))
            pos = torch.tensor([i for _, i, _ in part])
            gold = torch.tensor([input_ids[n][i] for n, i, _ in part])
            lp = torch.log_softmax(logits[rows, pos].float(), dim=-1)[rows, gold.to(device)]
            for (n, _, _), v in zip(part, lp.tolist()):
                scores[n] += v
        return scores


@dataclass
class MLMOptions(StigmaOptions):
    """The fill-mask probe's options."""

    top_k: int = option(50, "predictions per prompt", check=positive)
    lexicon: str | None = option(
        None,
        "word,attitude CSV (default: the authors' 445 words if in the data dir, else "
        "the packaged likely/unlikely list)",
    )
    scores_only = "masked LMs"

    def effective(self) -> MLMOptions:
        """The lexicon chosen (:func:`choose_lexicon`): its name, or its path if given."""
        return dataclasses.replace(self, lexicon=choose_lexicon(self.lexicon).pinned)


class MLM(StigmaProbe):
    """The SDS statements on a masked LM: fill-mask + an attitude lexicon (``scd eval mlm``)."""

    name = "mlm"
    help = "stigma: SDS statements on a masked LM, fill-mask + attitude lexicon (Mei et al. 2023)"
    Options = MLMOptions
    model_kinds = ("masked",)
    table_file = "sds"
    scores_xlnet = True

    def inputs(self, options: MLMOptions) -> dict[str, Path]:
        return {**super().inputs(options), "lexicon": choose_lexicon(options.lexicon).path}

    def task(self, model: CausalModel, options: MLMOptions) -> StigmaTask:
        load_lexicon(choose_lexicon(options.lexicon).path)  # a bad lexicon fails before the model
        return super().task(model, options)

    def scorer(self, task: Any, progress: bool) -> Any:
        from transformers import pipeline

        from scd.io import sha256_file

        lexicon = choose_lexicon(task.options.lexicon)
        if sha256_file(lexicon.path) != task.config["lexicon_sha256"]:
            raise InputError(
                "changed since the run was configured", key="lexicon", value=lexicon.path
            )
        words, top_k = load_lexicon(lexicon.path), task.options.top_k
        lm, tokenizer, device, batch = task.load_hf()
        if task.xlnet:
            return lambda rows: xlnet_chunk(lm, tokenizer, rows, words, top_k, batch)
        pipe = pipeline("fill-mask", model=lm, tokenizer=tokenizer, top_k=top_k, device=device)
        return lambda rows: fill_mask_chunk(pipe, rows, words, batch)

    def summarize(self, records: list[dict[str, Any]], task: Any) -> dict[str, Any]:
        from scd.eval.benchmarks.stigma.sds import summarize_sds

        n = max(len(records), 1)
        lexicon = choose_lexicon(task.options.lexicon)
        return {
            **summarize_sds(records, task.options.seed),
            "mean_topk_mass": sum(r["topk_mass"] for r in records) / n,
            "mean_rated_share": sum(r["rated_share"] for r in records) / n,
            "scoring": "xlnet_perm_mask" if task.xlnet else "fill_mask_pipeline",
            "lexicon_source": lexicon.source,
            "lexicon": str(lexicon.path),
            "lexicon_note": lexicon.note,
        }

    def table(self, runs: dict[str, Any]) -> Any:
        """Masked-LM runs side by side and pooled (Mei et al. 2023, Figures 2 and 3)."""
        from scd.eval.benchmarks.stigma.tables import probe_table

        return probe_table(self.name, runs)

    def markdown(self, summary: dict[str, Any], title: str) -> str:
        from scd.eval.benchmarks.stigma.sds import sds_markdown

        text = sds_markdown(summary, title)
        lexicon = summary.get("lexicon_note")  # absent in summaries written before it was added
        text += (
            f"\nTop-k probability mass: {summary['mean_topk_mass']:.3f} (mean per prompt); "
            f"share of it rated by the lexicon: {summary['mean_rated_share']:.3f}.\n"
        )
        return text + (f"\nLexicon: {lexicon}.\n" if lexicon else "")
