"""``scd eval stigma``: run one stigma probe on a model and write records, summary and tables.

=============  ======================  ==================================  ==================
probe          model                   prompts (``scd generate stigma``)   per-prompt measure
=============  ======================  ==================================  ==================
``sds``        causal LM (hf, vllm)    ``sds.parquet``                     P(Unlikely)
``mlm``        masked LM (hf)          ``sds.parquet``                     lexicon P(negative)
``aq27``       causal or masked LM     ``aq27.parquet``                    log-likelihood/PLL
``sentiment``  sequence classifier     ``sentiment.parquet``               negative label
=============  ======================  ==================================  ==================

Writes ``OUT/records.jsonl`` (chunk-aligned and resumable, :mod:`scd.eval.records`),
``OUT/run.json`` (the pinned configuration: a re-run with the same options resumes, other
options are refused), ``OUT/summary.json`` and ``OUT/tables.md``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scd.data_gen.stigma_probes import read_stigma_table
from scd.errors import InputError, first_line
from scd.eval.engines import SharedEngine
from scd.eval.runner import CausalModel, CausalTask, require_adapter, run_task
from scd.eval.stigma import aq27, mlm, sds, sentiment
from scd.io import sha256_file
from scd.options import EVAL_BATCH_SIZE, EngineSpec

__all__ = ["PROBES", "StigmaTask", "evaluate_stigma", "model_kind"]

PROBES = ("sds", "aq27", "sentiment", "mlm")
TABLE = {"sds": "sds", "mlm": "sds", "aq27": "aq27", "sentiment": "sentiment"}
KINDS = {  # probe -> model kinds it accepts
    "sds": ("causal",),
    "mlm": ("masked",),
    "aq27": ("causal", "masked"),
    "sentiment": ("classifier",),
}
HINT = {"masked": "use --probe mlm or aq27", "classifier": "use --probe sentiment"}


def model_kind(model: str) -> str:
    """``causal``, ``masked`` or ``classifier``, from the model config's architectures."""
    from transformers import AutoConfig

    try:
        archs = AutoConfig.from_pretrained(model).architectures or []
    except (OSError, ValueError) as err:
        first = first_line(err)
        raise InputError(
            "cannot load a model config (a local model directory or a Hub id "
            f"is expected): {first}",
            key="model",
            value=model,
        ) from None
    if any(a.endswith("ForMaskedLM") for a in archs):
        return "masked"
    if any(a.endswith("ForSequenceClassification") for a in archs):
        return "classifier"
    return "causal"


def _check(probe: str, kind: str, backend: str, model: str) -> None:
    if kind not in KINDS[probe]:
        hint = HINT.get(kind, "use --probe sds or aq27")
        raise InputError(
            f"a {kind} model does not fit --probe {probe}; {hint}", key="model", value=model
        )
    if backend == "vllm" and kind != "causal":
        raise InputError(
            f"probe {probe} on a {kind} model runs on hf only", key="backend", value="vllm"
        )


def evaluate_stigma(
    probe: str,
    model: str,
    prompts: Path | str,
    out: Path | str,
    *,
    adapter: str | None = None,
    engine: EngineSpec | None = None,
    progress: bool = True,
    seed: int = 0,
    chunk_size: int = 256,
    top_k: int = 50,
    lexicon: Path | str | None = None,
    negative_label: str | None = None,
    mlm_run: Path | str | None = None,
    shared: SharedEngine | None = None,
) -> dict[str, Any]:
    """Evaluate (or resume evaluating) one stigma probe; return the summary.

    Args:
        probe: ``sds``, ``aq27``, ``sentiment`` or ``mlm`` (module docstring).
        model: Local model directory or Hub id.
        prompts: A directory from ``scd generate stigma``.
        out: The result directory (re-run with the same options to resume).
        adapter: A PEFT adapter directory, kept unmerged.
        engine: How the model runs (vllm: causal models only; the system prompt: ``sds``
            only; batch size and device also for masked LMs and classifiers).
        progress: Show a progress bar.
        seed: Seed of the bootstrap CIs.
        chunk_size: Prompts per resumable chunk.
        top_k: ``mlm``: predictions per prompt (Mei et al. 2023: 50).
        lexicon: ``mlm``: a ``word,attitude`` CSV (default: the packaged likely/unlikely one).
        negative_label: ``sentiment``: the classifier's negative label (default: found by name).
        mlm_run: ``sentiment``: a finished ``mlm`` run; adds Pearson r per condition.
        shared: A :class:`~scd.eval.engines.SharedEngine` of ``model`` (causal probes).

    Returns:
        The summary (also ``OUT/summary.json``).

    Raises:
        InputError: An unknown probe or backend, a model of the wrong kind for the probe, a
            missing prompt directory or table, a bad lexicon or adapter, or an ``OUT`` that holds
            a run with other options. Nothing is written before the model has loaded.
    """
    if probe not in PROBES:
        raise InputError(f"expected one of {', '.join(PROBES)}", key="probe", value=probe)
    require_adapter(adapter)
    engine = (engine or EngineSpec()).check()
    if probe != "sds":
        engine = dataclasses.replace(engine, system_prompt=None)
    if top_k < 1:
        raise InputError("expected a positive number", key="top_k", value=top_k)
    rows = read_stigma_table(prompts, TABLE[probe])
    words = mlm.load_lexicon(lexicon) if probe == "mlm" else None
    mlm_summary = sentiment.read_mlm_run(mlm_run) if mlm_run and probe == "sentiment" else None
    from scd.models import resolve_model

    loadable = resolve_model(model)  # a GGUF file is converted once (cached)
    kind = model_kind(loadable)
    _check(probe, kind, engine.backend, model)
    config = {
        "kind": "stigma_eval",
        "probe": probe,
        "model": model,
        "model_kind": kind,
        "adapter": adapter,
        **engine.identity(),
        "seed": seed,
        "chunk_size": chunk_size,
        "n_items": len(rows),
        "prompts_sha256": sha256_file(Path(prompts) / f"{TABLE[probe]}.parquet"),
        "top_k": top_k if probe == "mlm" else None,
        "lexicon": str(lexicon or mlm.DEFAULT_LEXICON) if probe == "mlm" else None,
        "lexicon_sha256": _lexicon_sha(lexicon) if probe == "mlm" else None,
        "negative_label": negative_label if probe == "sentiment" else None,
    }
    causal = CausalModel(loadable, adapter, engine, shared)
    task = StigmaTask(config, rows, chunk_size, causal, probe=probe, kind=kind, words=words,
                      negative_label=negative_label, mlm_summary=mlm_summary)  # fmt: skip
    return run_task(task, out, progress=progress)


def _lexicon_sha(lexicon: Path | str | None) -> str:
    return sha256_file(Path(lexicon) if lexicon else mlm._default_lexicon())


@dataclass(kw_only=True)
class StigmaTask(CausalTask):
    """One stigma probe on a causal LM (through an engine), a masked LM or a classifier (whose
    location and options ``model`` holds too)."""

    probe: str
    kind: str
    words: Any = None  # mlm: the lexicon
    negative_label: str | None = None  # sentiment
    mlm_summary: dict[str, Any] | None = None  # sentiment: adds Pearson r per condition
    unit = "prompt"

    @property
    def name(self) -> str:
        return f"scd eval stigma {self.probe}"

    def load(self, progress: bool) -> None:
        """Set ``self._score`` (rows -> records) for the probe and the model's kind."""
        if self.kind == "causal":
            engine, fmt = self.model.load(progress)
            if self.probe == "sds":
                self._score = lambda rows: sds.score_chunk(engine, fmt, rows)
            else:
                self._score = lambda rows: aq27.score_chunk(engine, fmt.tokenizer, rows)
            return
        import torch
        from transformers import pipeline

        m, spec = self.model, self.model.spec
        device = spec.device or ("cuda" if torch.cuda.is_available() else "cpu")
        batch = spec.batch_size or EVAL_BATCH_SIZE
        if self.kind == "classifier":
            clf, tokenizer = sentiment.load_classifier(m.model, m.adapter, device)
            pipe = pipeline("text-classification", model=clf, tokenizer=tokenizer, device=device)
            negative = sentiment.negative_label_of(clf.config.id2label, self.negative_label)
            self._score = lambda rows: sentiment.classify_chunk(pipe, rows, negative, batch)
            return
        lm, tokenizer = mlm.load_masked_lm(m.model, m.adapter, device)
        if self.probe == "mlm":
            pipe = pipeline("fill-mask", model=lm, tokenizer=tokenizer,
                            top_k=self.config["top_k"], device=device)  # fmt: skip
            self._score = lambda rows: mlm.fill_mask_chunk(pipe, rows, self.words, batch)
        else:
            self._score = lambda rows: mlm.pll_chunk(lm, tokenizer, rows, batch * 8)

    def score(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return self._score(rows)

    def summarize(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        summary = _summarize(self.probe, self.kind, records, self.config["seed"])
        if self.mlm_summary is not None:
            summary["correlation"] = sentiment.correlate(self.mlm_summary, summary)
        return summary

    def render(self, summary: dict[str, Any]) -> dict[str, str]:
        return {"tables.md": _markdown(summary)}


def _summarize(probe: str, kind: str, records: list[dict], seed: int) -> dict[str, Any]:
    if probe in ("sds", "mlm"):
        summary = sds.summarize_sds(records, seed)
        if probe == "mlm":
            n = max(len(records), 1)
            summary["mean_topk_mass"] = sum(r["topk_mass"] for r in records) / n
            summary["mean_rated_share"] = sum(r["rated_share"] for r in records) / n
    elif probe == "aq27":
        summary = aq27.summarize_aq27(records)
        summary["scoring"] = "pll_word_l2r" if kind == "masked" else "causal_prior_corrected"
    else:
        summary = sentiment.summarize_sentiment(records, seed)
    return {"probe": probe, **summary}


def _markdown(summary: dict[str, Any]) -> str:
    probe, model = summary["probe"], summary["run"]["model"]
    title = f"Stigma probe {probe}: {model}"
    if probe == "aq27":
        return aq27.aq27_markdown(summary, title)
    if probe == "sentiment":
        text = sds.sds_markdown(summary, title, "proportion of negative predictions")
        c = summary.get("correlation")
        if c:
            text += (
                f"\nPearson r (MLM P(negative attitude) vs proportion negative, per condition): "
                f"{sds._f(c['r'])} (p = {sds._f(c['p'], 4)}, n = {c['n']}).\n"
            )
        return text
    text = sds.sds_markdown(summary, title)
    if probe == "mlm":
        text += (
            f"\nTop-k probability mass: {summary['mean_topk_mass']:.3f} (mean per prompt); share "
            f"of it rated by the lexicon: {summary['mean_rated_share']:.3f}.\n"
        )
    return text
