"""``scd audit scm``: the Stereotype Content Model audit of a corpus (:mod:`scd.audit`), its
arguments and what it does."""

from __future__ import annotations

import argparse

from scd.cli_parser import add_threads, command_group, positive_int
from scd.config.options import add_options
from scd.eval.engines.hf_setup import HFOptions

__all__ = ["add_audit", "audit_scm"]


def add_audit(sub: argparse._SubParsersAction) -> None:
    asub = command_group(sub, "audit", "audit a corpus: Stereotype Content Model of illnesses")
    scm = asub.add_parser(
        "scm",
        help="warmth and competence of a corpus's illness mentions, mental vs physical, beside "
        "the BIAS map (Mina et al. 2024)",
    )
    scm.add_argument(
        "--corpus",
        required=True,
        help="a text file (one document per line), "
        "JSONL or Parquet with a text column, or a Hub dataset id",
    )
    scm.add_argument(
        "--seeds",
        required=True,
        nargs="+",
        help="SCM seed sentences: "
        "Sentence,Target CSV files or a directory of them (data/ of "
        "github.com/katiefraser/computational-SCM)",
    )
    scm.add_argument(
        "--encoder",
        default="sentence-transformers/all-mpnet-base-v2",
        help="sentence encoder: a sentence-transformers model, or a language model "
        "(mean-pooled hidden states): a directory, .gguf file or Hub id",
    )
    scm.add_argument(
        "--encoder-layers",
        type=positive_int,
        metavar="N",
        help="keep only the encoder's first N layers (e.g. 15 of SmolLM2-135M's 30: VALIDATION.md)",
    )
    scm.add_argument(
        "--terms",
        help="illness terms YAML {type: [terms]} (default: the AQ-27 lists of --language)",
    )
    scm.add_argument("--language", choices=("en", "es"), default="en", help="default terms")
    scm.add_argument("--text-column", default="text", help="JSONL/Parquet/dataset column")
    scm.add_argument(
        "--aq27-run",
        help="a finished `scd eval stigma --probe aq27` dir: its "
        "mental - physical results beside the BIAS map",
    )
    scm.add_argument(
        "--cross-validate",
        action="store_true",
        help="5-fold cross-validation of the SCM model on the seed sentences (into summary.json)",
    )
    scm.add_argument("--cache", default="outputs/cache", help="SCM models and embeddings")
    add_options(scm, HFOptions, ["device"])
    scm.add_argument("--batch-size", type=positive_int, default=64, help="sentences per batch")
    scm.add_argument("--no-progress", action="store_true", help="no progress bars")
    scm.add_argument("--out", required=True, help="output directory")
    add_threads(scm)


def audit_scm(args: argparse.Namespace) -> None:
    from scd.audit.audit import audit_scm

    summary = audit_scm(
        args.corpus,
        args.out,
        seeds=args.seeds,
        encoder=args.encoder,
        encoder_layers=args.encoder_layers,
        terms=args.terms,
        language=args.language,
        text_column=args.text_column,
        aq27_run=args.aq27_run,
        cache=args.cache,
        device=args.device,
        batch_size=args.batch_size,
        validate=args.cross_validate,
        progress=not args.no_progress,
    )
    means = ", ".join(
        f"{kind} {t['warmth']['mean']:+.3f}" for kind, t in summary["types"].items() if t["n"]
    )
    print(
        f"{summary['n_matched']:,} of {summary['n_sentences']:,} sentences mention an illness; "
        f"mean warmth {means} -> {args.out}/tables.md"
    )
