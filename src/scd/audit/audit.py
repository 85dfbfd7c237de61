"""``scd audit scm``: place a corpus's illness mentions on the Stereotype Content Model's warmth
and competence axes (Mina et al. 2024, section 3.2), mental vs physical, beside the BIAS map.

Every input is checked before the encoder loads (nothing is written on bad input); the SCM
model is trained once per encoder and seed set, and sentence embeddings are cached by encoder
and sentences, both under ``cache`` (a re-run only re-reads them).

Output (``OUT/``, written atomically): ``sentences.parquet`` (one row per matched sentence:
document, sentence, terms per type, warmth, competence), ``summary.json``, ``tables.md`` and
``scm_density.png``.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from scd import __version__
from scd.audit import corpus as corpora
from scd.audit import summary as report
from scd.audit.scm import N_COMPONENTS, SCMModel, SeedSentence, cross_validate, load_seeds
from scd.config.threads import n_parameters, use_threads
from scd.errors import InputError, first_line
from scd.io import atomic_output_dir, cache_key, check_output_dir

__all__ = ["DEFAULT_ENCODER", "audit_scm", "encoder_key", "load_encoder", "train_scm"]

DEFAULT_ENCODER = "sentence-transformers/all-mpnet-base-v2"  # Mina et al. 2024 (English)


def load_encoder(encoder: str, device: str | None = None, layers: int | None = None) -> Any:
    """A sentence encoder: a sentence-transformers model as it is, or any other transformers
    model (a language model's directory, ``.gguf`` file or Hub id: see
    :func:`scd.models.resolve.resolve_model`) with mean pooling over its last hidden states.
    With ``layers``, only the first ``layers`` transformer layers are kept (a language model's
    middle layers place the SCM seed adjectives better than its last: VALIDATION.md). No
    remote code.

    Raises:
        InputError: an encoder that cannot be found or loaded, or ``layers`` outside 1..depth.
    """
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from sentence_transformers.util import is_sentence_transformer_model
    from transformers.utils import logging as hf_logging

    from scd.models.resolve import resolve_model

    path = resolve_model(encoder, key="--encoder")
    config_kwargs, verbosity = None, hf_logging.get_verbosity()
    if layers is not None:
        depth = _depth(path, encoder)
        if not 1 <= layers <= depth:
            raise InputError(
                f"expected 1 to {depth} (the layers of {encoder})",
                key="encoder_layers",
                value=layers,
            )
        config_kwargs = {"num_hidden_layers": layers}
        hf_logging.set_verbosity_error()  # else the dropped layers' weights show as unexpected
    try:
        if is_sentence_transformer_model(path):
            return SentenceTransformer(
                path, device=device, trust_remote_code=False, config_kwargs=config_kwargs
            )
        text_only = {"text": {"method": "forward", "method_output_name": "last_hidden_state"}}
        module = Transformer(  # no remote code by default; plain text, not a chat message
            path,
            config_kwargs=config_kwargs,
            module_output_name="token_embeddings",
            modality_config=text_only,
        )
        tokenizer = module.tokenizer
        if tokenizer.pad_token is None:  # causal LMs often have none; batches need one
            if tokenizer.eos_token is None:
                raise ValueError("its tokenizer has neither a pad nor an end-of-sequence token")
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "right"  # left pads would shift a causal LM's positions
        pooling = Pooling(module.get_embedding_dimension(), "mean")
        return SentenceTransformer(modules=[module, pooling], device=device)
    except (OSError, ValueError, ImportError, RuntimeError) as err:  # not found, bad weights
        raise InputError(
            f"cannot load a sentence encoder ({first_line(err)})", key="encoder", value=encoder
        ) from None
    finally:
        hf_logging.set_verbosity(verbosity)


def _depth(path: str, encoder: str) -> int:
    """The number of transformer layers in the config of ``path``."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=False)
        composite = config.get_text_config() is not config
    except (OSError, ValueError) as err:
        raise InputError(
            f"--encoder-layers needs the encoder's config.json ({first_line(err)})",
            key="encoder",
            value=encoder,
        ) from None
    depth = getattr(config, "num_hidden_layers", None)
    if composite or not isinstance(depth, int):
        raise InputError(
            "--encoder-layers needs a config with num_hidden_layers at its top "
            "level (not a multimodal one)",
            key="encoder",
            value=encoder,
        )
    return depth


def encoder_key(path: str, layers: int | None) -> str:
    """What names an encoder's embeddings in caches: its content, how it is read (a language
    model: plain text, mean-pooled) and the layers kept."""
    from sentence_transformers.util import is_sentence_transformer_model

    from scd.models import model_fingerprint

    key = model_fingerprint(path) + ("" if is_sentence_transformer_model(path) else "@text-mean")
    return key if layers is None else f"{key}@layers={layers}"


def train_scm(
    model: Any,
    encoder_key: str,
    sentences: list[SeedSentence],
    cache: Path | None,
    progress: bool = True,
    batch_size: int = 64,
    validate: bool = False,
) -> tuple[SCMModel, dict[str, Any]]:
    """The SCM model of an encoder and seed sentences (:func:`scd.audit.scm.load_seeds`): loaded
    from ``cache`` or trained (and, with ``validate``, cross-validated:
    :func:`scd.audit.scm.cross_validate`)."""
    texts = [s.text for s in sentences]
    seeds_hash = corpora.fingerprint(f"{s.text}\t{s.label}" for s in sentences)
    key = cache_key(
        kind="scm_model", encoder=encoder_key, n_components=N_COMPONENTS, seeds=seeds_hash
    )
    where = cache / "scm-model" / key if cache is not None else None
    if where is not None and (where / "manifest.json").is_file():
        info = json.loads((where / "manifest.json").read_text())
        if not validate or "cross_validation" in info:
            return SCMModel.load(where), info
    vectors = corpora.encode(model, texts, embeddings(cache), encoder_key, progress, batch_size)
    scm = SCMModel.fit(vectors, [s.label for s in sentences])
    info = {"encoder": encoder_key, "n_seed_sentences": len(texts), "n_components": N_COMPONENTS}
    if validate:  # cross_validate embeds exactly ``texts``: reuse their vectors
        info["cross_validation"] = cross_validate(sentences, lambda _: vectors)
    if where is not None:
        scm.save(where, info)
    return scm, info


def embeddings(cache: Path | None) -> Path | None:
    return cache / "embeddings" if cache is not None else None


def _matched_sentences(
    documents: list[str], matcher: corpora.TermMatcher
) -> tuple[list[dict[str, Any]], int]:
    """Every sentence of ``documents`` that mentions an illness term, as a row (its document's
    index, the sentence, the terms found of each kind), and how many sentences there were."""
    rows, n_sentences = [], 0
    for d, document in enumerate(documents):
        split = corpora.split_sentences(document)
        n_sentences += len(split)
        for sentence in split:
            if found := matcher.find(sentence):
                terms_of = {f"{kind}_terms": found.get(kind, []) for kind in matcher.patterns}
                rows.append({"document": d, "sentence": sentence, **terms_of})
    return rows, n_sentences


def audit_scm(
    source: str,
    out: Path | str,
    *,
    seeds: list[str],
    encoder: str = DEFAULT_ENCODER,
    encoder_layers: int | None = None,
    terms: str | None = None,
    language: str = "en",
    text_column: str = "text",
    aq27_run: str | None = None,
    cache: Path | str | None = None,
    device: str | None = None,
    batch_size: int = 64,
    validate: bool = False,
    progress: bool = True,
) -> dict[str, Any]:
    """Audit ``source`` (a corpus, see :func:`scd.audit.corpus.read_corpus`) into ``out``;
    return the summary.

    Raises:
        InputError: a bad corpus, seed file, terms file, encoder or AQ-27 run, an output
            directory of something else, or no sentence that mentions an illness term.
    """
    from scd.eval.benchmarks.tables import read_summary  # imports scipy: only when run
    from scd.models.resolve import resolve_model

    for module in ("sentence_transformers", "sklearn"):
        if importlib.util.find_spec(module) is None:
            raise InputError(
                f"needs {module} (pip install 'scd[audit]')", key="encoder", value=encoder
            )
    out = check_output_dir(out, "scd_scm_audit")
    sentences = load_seeds(seeds)  # checked before anything loads
    matcher = corpora.TermMatcher(corpora.load_terms(terms, language))
    aq27 = read_summary(aq27_run, "aq27", probe=True, key="aq27_run") if aq27_run else None
    documents = corpora.read_corpus(source, text_column)
    rows, n_sentences = _matched_sentences(documents, matcher)
    if not rows:
        raise InputError(
            f"none of its {n_sentences:,} sentences mentions an illness term",
            key="corpus",
            value=source,
        )
    model = load_encoder(encoder, device, encoder_layers)  # errors name what the user gave
    use_threads(n_parameters(model))  # torch's threads for its size (scd.config.threads)
    local = resolve_model(encoder, key="--encoder", say=lambda _: None)  # converted: cached
    cache = Path(cache) if cache is not None else None
    key = encoder_key(local, encoder_layers)
    scm, scm_info = train_scm(model, key, sentences, cache, progress, batch_size, validate)
    texts = [r["sentence"] for r in rows]
    scores = scm.score(corpora.encode(model, texts, embeddings(cache), key, progress, batch_size))
    for r, (warmth, competence) in zip(rows, scores):
        r.update(warmth=float(warmth), competence=float(competence))
    by_type = {kind: scores[[bool(r[f"{kind}_terms"]) for r in rows]] for kind in matcher.patterns}
    summary = {
        "n_documents": len(documents),
        "n_sentences": n_sentences,
        "n_matched": len(rows),
        **report.summarize_scores(by_type),
        "bias_map": report.bias_map_rows(by_type, aq27),
        "scm_model": scm_info,
        "run": {
            "corpus": source,
            "encoder": encoder,
            "encoder_layers": encoder_layers,
            "seeds": list(seeds),
            "terms": terms,
            "language": language,
            "aq27_run": aq27_run,
            "scd_version": __version__,
        },
    }
    _write(out, rows, summary, report.density_png(by_type, f"SCM: {Path(source).name}"))
    return summary


def _write(out: Path, rows: list[dict], summary: dict[str, Any], png: bytes) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    with atomic_output_dir(out, kind="scd_scm_audit") as tmp:
        pq.write_table(pa.Table.from_pylist(rows), tmp / "sentences.parquet")
        (tmp / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        (tmp / "tables.md").write_text(report.audit_markdown(summary))
        (tmp / "scm_density.png").write_bytes(png)
        (tmp / "manifest.json").write_text(json.dumps({"kind": "scd_scm_audit"}) + "\n")
