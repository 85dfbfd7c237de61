"""``scd export lm-eval``: scd's benchmarks as a task directory of lm-evaluation-harness
(:mod:`scd.export`), its arguments and what it does."""

from __future__ import annotations

import argparse

from scd.cli_parser import command_group, positive_int

__all__ = ["add_export", "export_lm_eval"]


def add_export(sub: argparse._SubParsersAction) -> None:
    esub = command_group(sub, "export", "scd's benchmarks as tasks of other tools")
    lm = esub.add_parser(
        "lm-eval",
        help="an lm-evaluation-harness task directory: bias %% on the contact prompts (and the "
        "SDS gap), scored as scd scores them; run with lm_eval --include_path OUT --tasks scd",
    )
    lm.add_argument("--prompts", help="directory from `scd generate contact`")
    lm.add_argument("--stigma-prompts", help="directory from `scd generate stigma` (the SDS task)")
    lm.add_argument(
        "--limit",
        type=positive_int,
        help="the stratified subset of ~N descriptor "
        "prompts that `scd eval bias --limit N` takes (baselines on top)",
    )
    lm.add_argument("--seed", type=int, default=0, help="seed of the --limit subset")
    lm.add_argument(
        "--format",
        choices=("chat", "plain"),
        default="chat",
        help="chat: for "
        "lm_eval --apply_chat_template; plain: scd's format for models without a "
        "chat template",
    )
    lm.add_argument("--out", required=True, help="output directory")


def export_lm_eval(args: argparse.Namespace) -> None:
    from scd.export.lm_eval import export_lm_eval

    info = export_lm_eval(
        args.out,
        prompts=args.prompts,
        stigma=args.stigma_prompts,
        limit=args.limit,
        seed=args.seed,
        fmt=args.format,
    )
    docs = ", ".join(f"{name} {n:,}" for name, n in info["tasks"].items())
    chat = " --apply_chat_template" if args.format == "chat" else ""
    print(
        f"lm-eval tasks ({docs} documents) -> {args.out}; run: lm_eval --include_path "
        f"{args.out} --tasks scd{chat} ..."
    )
