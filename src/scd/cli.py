"""The one ``scd`` command.

    scd generate contact --descriptors holistic_bias --out prompts/hb
    scd generate contact --descriptors stigma --out prompts/stigma
    scd generate stigma --out prompts/stigma_probes
    scd eval stigma --probe sds --model MODEL --prompts prompts/stigma_probes --out out/sds
    scd export lm-eval --prompts prompts/hb --limit 2400 --out lm_eval_tasks/scd
    scd generate sft --prompts prompts/hb --setting 1 --out sft/setting1
    scd quickstart

Bad input is reported as one line on stderr with exit code 2 (``SCD_DEBUG=1`` adds the traceback
with the library's own error); heavy modules are imported only by the subcommand that needs them.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence

from scd import commands
from scd.cli_args import add_commands
from scd.cli_audit import audit_scm
from scd.cli_data import data_fetch, data_list, data_verify
from scd.cli_export import export_lm_eval
from scd.cli_parser import Parser
from scd.errors import InputError, RunFailed

__all__ = ["HANDLERS", "main", "build_parser"]

# "<command>[ <what>]" -> the function that runs it
HANDLERS: dict[str, Callable[[argparse.Namespace], None]] = {
    "generate contact": commands.generate_contact,
    "generate stigma": commands.generate_stigma,
    "generate sft": commands.generate_sft,
    "eval": commands.evaluate,  # every benchmark's, and the stigma probes'
    "audit scm": audit_scm,
    "export lm-eval": export_lm_eval,
    "train": commands.train,
    "run": commands.run,
    "report": commands.report,
    "merge": commands.merge,
    "toy-model": commands.toy_model,
    "fetch-model": commands.fetch_model,
    "quickstart": commands.quickstart,
    "data list": data_list,
    "data fetch": data_fetch,
    "data verify": data_verify,
}


class _Version(argparse.Action):
    """``--version``: the installed package's version, read only when asked for."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs) -> None:
        kwargs.update(nargs=0, default=argparse.SUPPRESS)
        kwargs.setdefault("help", "show program's version number and exit")
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args) -> None:
        from scd import __version__

        print(f"scd {__version__}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The ``scd`` argument parser."""
    Parser.parsers = []
    parser = Parser(prog="scd", description="Social Contact Debiasing toolkit")
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(
        dest="command", required=True, parser_class=Parser, metavar="COMMAND"
    )
    add_commands(sub)
    return parser


def _print_chain(err: BaseException) -> None:
    """The traceback of ``err`` with every cause, those hidden by ``raise ... from None`` too."""
    import traceback

    cause: BaseException | None = err
    while cause is not None:
        cause.__suppress_context__ = False
        cause = cause.__cause__ or cause.__context__
    traceback.print_exception(err, file=sys.stderr)


def _use_threads_flag(flag: str | None) -> None:
    """``--threads`` into ``SCD_THREADS`` (what torchrun's and Ray's processes read too), checked
    before any work (:mod:`scd.config.threads` applies it where torch starts); and OpenMP's idle
    threads sleeping rather than spinning (``OMP_WAIT_POLICY=PASSIVE``, read once, when torch
    loads: now is before), which beside other work on the cores was several times faster
    (BENCHMARKS.md, "Threads that fit the machine"). A value already set wins; none with
    ``SCD_THREADS=torch``."""
    from scd.config.threads import ENV, check_env

    if flag is not None:
        os.environ[ENV] = flag
    if check_env() != "torch":
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``scd`` command; returns the exit code."""
    # bitsandbytes warns at import, on CPUs with AVX512-BF16, that an optional CPU 4-bit kernel
    # package is missing: noise for every command (and it would break one-line errors)
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
    if not sys.stderr.isatty():  # transformers' and the Hub's bars are noise in a log file
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    Parser.argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    what = getattr(args, "what", None)  # every benchmark's handler is the one of "eval"
    name = args.command if what is None or args.command == "eval" else f"{args.command} {what}"
    try:
        if hasattr(args, "threads"):  # a command that computes with torch
            _use_threads_flag(args.threads)
        if getattr(args, "out", None):  # a --out that cannot be written: before any model loads
            from scd.eval.tasks import check_writable

            file = args.command == "report" and args.out.endswith(".md")  # the table's file
            check_writable(args.out, directory=not file)
        HANDLERS[name](args)
    except (InputError, RunFailed) as err:  # RunFailed: tasks of a Ray run failed, exit code 1
        if isinstance(err, InputError) and os.environ.get("SCD_DEBUG"):
            _print_chain(err)  # the whole chain, down to the library's own error
        for line in str(err).splitlines():  # one line per problem (a recipe reports them all)
            print(f"scd: error: {line}", file=sys.stderr)
        return 2 if isinstance(err, InputError) else 1
    except KeyboardInterrupt:
        print("scd: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
