"""Masked-LM probes: fill-mask with an attitude lexicon (Mei et al. 2023) and PLL scoring
(Mina et al. 2024).

Fill-mask (Mei et al. 2023, section 4.3): the ``top_k`` (default 50) predictions of the
``fill-mask`` pipeline for each SDS statement are looked up in an attitude lexicon (a CSV
``word,attitude`` with attitudes positive / negative / neutral / irrelevant; case-insensitive,
surrounding space ignored). ``p_negative = neg / (pos + neg + neu)`` of summed probabilities;
irrelevant and unrated words are dropped. Each record also keeps ``topk_mass`` (probability of the
k predictions) and ``rated_share`` (the share of that mass the lexicon rates, irrelevant words
included): a low share means the lexicon does not fit the model's vocabulary.

PLL (Mina et al. 2024, section 3.1): the PLL-word-l2r score of Kauf & Ivanova (2023), the metric
Mina et al. used through minicons. Every token is predicted with itself and the tokens to its right
*within the same word* masked; the sentence score is the sum of these log-probabilities. Words come
from the fast tokenizer's ``word_ids``. It is implemented here (a dozen lines, tested against a
naive computation) rather than taken from minicons, to keep the dependency set small.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

from scd.config.options import option, positive
from scd.errors import InputError
from scd.eval.benchmarks.stigma.common import StigmaOptions, StigmaProbe
from scd.eval.benchmarks.stigma.sds import RECORD_KEYS
from scd.eval.benchmarks.stigma.stats import ATTITUDES, p_negative

__all__ = [
    "MLM", "DEFAULT_LEXICON", "fill_mask_chunk", "load_lexicon", "pll_scores",
]  # fmt: skip

DEFAULT_LEXICON = "likely_unlikely_lexicon.csv"
TOP_RECORDED = 10


def _default_lexicon() -> Path:
    return Path(str(files("scd.eval.benchmarks.stigma") / DEFAULT_LEXICON))


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
    lexicon: str | None = option(None, "word,attitude CSV (default: packaged likely/unlikely)")
    scores_only = "masked LMs"


class MLM(StigmaProbe):
    """The SDS statements on a masked LM: fill-mask + an attitude lexicon (``scd eval mlm``)."""

    name = "mlm"
    help = "stigma: SDS statements on a masked LM, fill-mask + attitude lexicon (Mei et al. 2023)"
    Options = MLMOptions
    model_kinds = ("masked",)
    table_file = "sds"

    def extra_config(self, options: MLMOptions) -> dict[str, Any]:
        from scd.io import sha256_file

        lexicon = Path(options.lexicon) if options.lexicon else _default_lexicon()
        load_lexicon(lexicon)  # a bad lexicon fails before the model loads
        return {"top_k": options.top_k, "lexicon": str(options.lexicon or DEFAULT_LEXICON),
                "lexicon_sha256": sha256_file(lexicon)}  # fmt: skip

    def scorer(self, task: Any, progress: bool) -> Any:
        from transformers import pipeline

        words = load_lexicon(task.options.lexicon)
        lm, tokenizer, device, batch = task.load_hf()
        pipe = pipeline("fill-mask", model=lm, tokenizer=tokenizer, top_k=task.options.top_k,
                        device=device)  # fmt: skip
        return lambda rows: fill_mask_chunk(pipe, rows, words, batch)

    def summarize(self, records: list[dict[str, Any]], task: Any) -> dict[str, Any]:
        from scd.eval.benchmarks.stigma.sds import summarize_sds

        n = max(len(records), 1)
        return {**summarize_sds(records, task.options.seed),
                "mean_topk_mass": sum(r["topk_mass"] for r in records) / n,
                "mean_rated_share": sum(r["rated_share"] for r in records) / n}  # fmt: skip

    def markdown(self, summary: dict[str, Any], title: str) -> str:
        from scd.eval.benchmarks.stigma.sds import sds_markdown

        text = sds_markdown(summary, title)
        return text + (
            f"\nTop-k probability mass: {summary['mean_topk_mass']:.3f} (mean per prompt); "
            f"share of it rated by the lexicon: {summary['mean_rated_share']:.3f}.\n"
        )
