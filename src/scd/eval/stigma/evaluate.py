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

import time
from pathlib import Path
from typing import Any

from scd import __version__
from scd.data_gen.stigma_probes import read_stigma_table
from scd.errors import InputError
from scd.eval.records import RecordLog, check_run_config
from scd.eval.runner import require_adapter, start_run, write_results
from scd.eval.stigma import aq27, mlm, sds, sentiment
from scd.io import json_text, sha256_file

__all__ = ["PROBES", "evaluate_stigma", "model_kind"]

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
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise InputError(
            f"--model {model}: cannot load a model config (a local model directory or a Hub id "
            f"is expected): {first[:200]}"
        ) from None
    if any(a.endswith("ForMaskedLM") for a in archs):
        return "masked"
    if any(a.endswith("ForSequenceClassification") for a in archs):
        return "classifier"
    return "causal"


def _check(probe: str, kind: str, backend: str, model: str) -> None:
    if probe not in PROBES:
        raise InputError(f"--probe {probe}: expected one of {', '.join(PROBES)}")
    if backend not in ("hf", "vllm"):
        raise InputError(f"--backend {backend}: expected one of hf, vllm")
    if kind not in KINDS[probe]:
        hint = HINT.get(kind, "use --probe sds or aq27")
        raise InputError(f"--model {model}: a {kind} model does not fit --probe {probe}; {hint}")
    if backend == "vllm" and kind != "causal":
        raise InputError(f"--backend vllm: probe {probe} on a {kind} model runs on hf only")


def evaluate_stigma(
    probe: str,
    model: str,
    prompts: Path | str,
    out: Path | str,
    *,
    adapter: str | None = None,
    backend: str = "hf",
    progress: bool = True,
    seed: int = 0,
    chunk_size: int = 256,
    top_k: int = 50,
    lexicon: Path | str | None = None,
    negative_label: str | None = None,
    mlm_run: Path | str | None = None,
    system_prompt: str | None = None,
    batch_size: int | None = None,
    device: str | None = None,
    dtype: str = "auto",
    engine: Any = None,
    **engine_options: Any,
) -> dict[str, Any]:
    """Evaluate (or resume evaluating) one stigma probe; return the summary.

    Args:
        probe: ``sds``, ``aq27``, ``sentiment`` or ``mlm`` (module docstring).
        model: Local model directory or Hub id.
        prompts: A directory from ``scd generate stigma``.
        out: The result directory (re-run with the same options to resume).
        adapter: A PEFT adapter directory, kept unmerged.
        backend: ``hf`` or ``vllm`` (causal models only).
        progress: Show a progress bar.
        seed: Seed of the bootstrap CIs.
        chunk_size: Prompts per resumable chunk.
        top_k: ``mlm``: predictions per prompt (seed 002: 50).
        lexicon: ``mlm``: a ``word,attitude`` CSV (default: the packaged likely/unlikely one).
        negative_label: ``sentiment``: the classifier's negative label (default: found by name).
        mlm_run: ``sentiment``: a finished ``mlm`` run; adds Pearson r per condition.
        system_prompt: ``sds``: a system message before every prompt.
        batch_size, device, dtype: Inference options (hf; batch size default 32).
        engine: A :class:`~scd.eval.engines.SharedEngine` of ``model`` (causal probes).
        **engine_options: Further engine options (e.g. ``tensor_parallel_size`` for vLLM).

    Returns:
        The summary (also ``OUT/summary.json``).

    Raises:
        InputError: An unknown probe or backend, a model of the wrong kind for the probe, a
            missing prompt directory or table, a bad lexicon or adapter, or an ``OUT`` that holds
            a run with other options. Nothing is written before the model has loaded.
    """
    if probe not in PROBES:
        raise InputError(f"--probe {probe}: expected one of {', '.join(PROBES)}")
    require_adapter(adapter)
    if top_k < 1:
        raise InputError(f"--top-k {top_k}: expected a positive number")
    rows = read_stigma_table(prompts, TABLE[probe])
    words = mlm.load_lexicon(lexicon) if probe == "mlm" else None
    mlm_summary = sentiment.read_mlm_run(mlm_run) if mlm_run and probe == "sentiment" else None
    from scd.models import resolve_model

    loadable = resolve_model(model)  # a GGUF file is converted once (cached)
    kind = model_kind(loadable)
    _check(probe, kind, backend, model)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: exists and is not a directory")
    config = {
        "kind": "stigma_eval",
        "probe": probe,
        "model": model,
        "model_kind": kind,
        "adapter": adapter,
        "backend": backend,
        "dtype": dtype,
        "seed": seed,
        "chunk_size": chunk_size,
        "n_items": len(rows),
        "prompts_sha256": sha256_file(Path(prompts) / f"{TABLE[probe]}.parquet"),
        "system_prompt": system_prompt if probe == "sds" else None,
        "top_k": top_k if probe == "mlm" else None,
        "lexicon": str(lexicon or mlm.DEFAULT_LEXICON) if probe == "mlm" else None,
        "lexicon_sha256": _lexicon_sha(lexicon) if probe == "mlm" else None,
        "negative_label": negative_label if probe == "sentiment" else None,
    }
    check_run_config(out, config, write=False)
    log = RecordLog(out / "records.jsonl", chunk_size, len(rows))
    if log.done < len(rows):
        options = {"batch_size": batch_size, "dtype": dtype, **engine_options}
        if device:
            options["device"] = device
        score = _scorer(probe, kind, loadable, adapter, backend, system_prompt, out, config,
                        options, progress, engine)  # fmt: skip
        _loop(score, rows, log, probe, progress, words=words, negative_label=negative_label)
    records = log.read()
    summary = _summarize(probe, kind, records, seed)
    if mlm_summary is not None:
        summary["correlation"] = sentiment.correlate(mlm_summary, summary)
    summary["run"] = {**config, "scd_version": __version__}
    write_results(out, {"summary.json": json_text(summary), "tables.md": _markdown(summary)})
    return summary


def _lexicon_sha(lexicon: Path | str | None) -> str:
    return sha256_file(Path(lexicon) if lexicon else mlm._default_lexicon())


def _scorer(  # fmt: skip
    probe, kind, model, adapter, backend, system_prompt, out, config, options, progress, engine
) -> Any:
    """Load the model; return ``(kind of scorer, objects)`` once ``out`` is pinned."""
    if kind == "causal":
        running, fmt = start_run(
            out,
            config,
            model=model,
            adapter=adapter,
            backend=backend,
            system_prompt=system_prompt,
            engine_options=options,
            progress=progress,
            engine=engine,
        )
        return ("causal", running, fmt)
    import torch
    from transformers import pipeline

    device = options.get("device") or ("cuda" if torch.cuda.is_available() else "cpu")
    if kind == "masked":
        lm, tokenizer = mlm.load_masked_lm(model, adapter, device)
        pipe = None
        if probe == "mlm":
            top_k = config["top_k"]
            pipe = pipeline("fill-mask", model=lm, tokenizer=tokenizer, top_k=top_k, device=device)
        obj: tuple = ("masked", lm, tokenizer, pipe)
    else:
        clf, tokenizer = sentiment.load_classifier(model, adapter, device)
        pipe = pipeline("text-classification", model=clf, tokenizer=tokenizer, device=device)
        obj = ("classifier", pipe)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"--out {out}: cannot write there ({err.strerror or err})") from None
    check_run_config(out, config)
    return (*obj, options.get("batch_size") or 32)


def _loop(score, rows, log, probe, progress, *, words, negative_label) -> None:
    from tqdm.auto import tqdm

    if score[0] == "classifier":
        id2label = score[1].model.config.id2label
        negative = sentiment.negative_label_of(id2label, negative_label)
    bar = tqdm(
        total=len(rows),
        initial=log.done,
        unit="prompt",
        disable=None if progress else True,  # None: off when not a terminal
        desc=f"scd eval stigma {probe}",
        dynamic_ncols=True,
    )
    start, before = time.perf_counter(), log.done
    for lo, hi in log.chunks():
        chunk = rows[lo:hi]
        if score[0] == "causal":
            _, engine, fmt = score
            if probe == "sds":
                records = sds.score_chunk(engine, fmt, chunk)
            else:
                records = aq27.score_chunk(engine, fmt.tokenizer, chunk)
        elif score[0] == "masked":
            _, lm, tokenizer, pipe, batch = score
            if probe == "mlm":
                records = mlm.fill_mask_chunk(pipe, chunk, words, batch)
            else:
                records = mlm.pll_chunk(lm, tokenizer, chunk, batch * 8)
        else:
            records = sentiment.classify_chunk(score[1], chunk, negative, score[2])
        log.append(records)
        bar.update(len(chunk))
        rate = (log.done - before) / max(time.perf_counter() - start, 1e-9)
        bar.set_postfix_str(f"{rate:,.1f} prompts/s")
    bar.close()


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
