"""The argument parser of the ``scd`` command: each option's default in its help, errors of one
line (exit code 2) that name an unknown option with the nearest known one, and the engine flags
of an evaluation."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from typing import Any

from scd.config.engine import DEFAULT_BACKEND, EngineSpec
from scd.config.options import add_options, argument_type, positive
from scd.eval.engines import engines_for

__all__ = [
    "HelpFormatter",
    "Parser",
    "add_engine_options",
    "add_threads",
    "command_group",
    "positive_int",
]


def add_engine_options(parser: argparse.ArgumentParser, kinds: Sequence[str]) -> None:
    """``--backend``: the engines that run a model of one of ``kinds``, and each one's own
    options in a group of its own (a flag two engines share: once, in the first group; an
    option for other model kinds only -- a causal LM's prefix cache on a masked-LM command --
    not at all)."""
    engines = engines_for(kinds)
    parser.add_argument(
        "--backend",
        choices=list(engines),
        default=DEFAULT_BACKEND,
        help="the engine that runs the model: "
        + "; ".join(f"{name}: {cls.help}" for name, cls in engines.items()),
    )
    added = {f.name for f in dataclasses.fields(EngineSpec)}
    for name, engine in engines.items():
        names = [
            f.name
            for f in dataclasses.fields(engine.Options)
            if f.name not in added and set(f.metadata.get("kinds") or kinds) & set(kinds)
        ]
        if names:
            group = parser.add_argument_group(f"{name} engine (--backend {name})")
            add_options(group, engine.Options, names)
            added.update(names)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, except the uninformative None and False."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default in (None, False) or isinstance(action.default, list):
            return action.help or ""
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, exit code 2; an unknown option is named
    (with the nearest known one) before a missing required one."""

    argv: list[str] = []  # the command line being parsed (set by main)
    parsers: list[Parser] = []  # every (sub)parser built, for the known option names

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        kwargs.setdefault("allow_abbrev", False)  # --prompt is not --prompts
        super().__init__(*args, **kwargs)
        Parser.parsers.append(self)

    def _suggest(self, flags: list[str]) -> str:
        import difflib

        # the options of the command being run: the deepest parser whose words start argv
        commands = {tuple(p.prog.split()[1:]): p for p in self.parsers}
        words = max((w for w in commands if list(w) == self.argv[: len(w)]), key=len)
        mine = [o for o in commands[words]._option_string_actions if o.startswith("--")]
        everywhere = sorted({o for p in self.parsers for o in p._option_string_actions})
        parts = []
        for flag in flags:
            near = difflib.get_close_matches(flag, mine, n=1)
            if self.argv[:1] in (["run"], ["train"]) and flag in ("--setting", "--settings"):
                near = ["--set run.settings=[N] (or --set data.setting=N)"]
                parts.append(f"{flag} (did you mean {near[0]}?)")  # a recipe key, not a flag
                continue
            owners = [p.prog for p in self.parsers if flag in p._option_string_actions]
            if owners:  # another command's option, perhaps also a misspelling of this one's
                more = f" and {len(owners) - 2} more" if len(owners) > 2 else ""
                where = f"an option of {', '.join(owners[:2])}{more}"
                mean = f"did you mean {near[0]}? {flag} is " if near else ""
                parts.append(f"{flag} ({mean}{where}, not of {commands[words].prog})")
                continue
            others = [o for o in everywhere if o != flag]
            near = near or difflib.get_close_matches(flag, others, n=1)
            parts.append(f"{flag} (did you mean {near[0]}?)" if near else flag)
        return ", ".join(parts)

    def _check_value(self, action: argparse.Action, value: object) -> None:
        """A word outside the choices (a command, a benchmark, an engine) is refused naming the
        nearest choice, if one is close (``crowspairs`` -> ``crows_pairs``, ``BBQ`` -> ``bbq``)."""
        if isinstance(value, str) and action.choices is not None and value not in action.choices:
            import difflib

            names = {str(c).lower(): str(c) for c in action.choices}
            near = difflib.get_close_matches(value.lower(), list(names), n=1)
            hint = f" -- did you mean {names[near[0]]!r}?" if near else ""
            listed = ", ".join(map(repr, action.choices))
            message = f"invalid choice: {value!r}{hint} (choose from {listed})"
            raise argparse.ArgumentError(action, message)
        super()._check_value(action, value)

    def error(self, message: str) -> None:  # type: ignore[override]
        known = {o for p in self.parsers for o in p._option_string_actions}
        flags = [a.split("=", 1)[0] for a in self.argv if a.startswith("--")]
        unknown = [f for f in flags if f not in known]
        if message.startswith("unrecognized arguments:"):  # a flag another command knows, too
            unknown = [
                a.split("=", 1)[0] for a in message.split(":", 1)[1].split() if a.startswith("--")
            ] or unknown
        if unknown and (message.startswith("unrecognized") or "required" in message):
            message = f"unrecognized arguments: {self._suggest(unknown)}"
        self.exit(2, f"{self.prog}: error: {message}\n")


positive_int = argument_type(int, positive)  # a flag's type: a positive integer


def _thread_count(text: str) -> str:
    """``--threads``: a positive number, auto or torch (checked as ``SCD_THREADS`` is)."""
    if text.strip().lower() in ("auto", "torch") or (text.isdigit() and int(text) > 0):
        return text.strip().lower()
    raise argparse.ArgumentTypeError(f"expected a positive number, auto or torch, got {text!r}")


def add_threads(parser: argparse.ArgumentParser) -> None:
    """``--threads`` of a command that computes with torch (scd.config.threads)."""
    parser.add_argument(
        "--threads",
        type=_thread_count,
        metavar="N",
        help="torch's CPU threads: N, auto (default: 1 for a small model such as the toy, else "
        "one per CPU this process may use, a cgroup CPU quota counted) or torch (torch's own "
        "default); sets SCD_THREADS",
    )


def command_group(sub: argparse._SubParsersAction, name: str, help: str) -> Any:
    """``scd NAME <what>``: a command whose subcommands are added to the returned object."""
    group = sub.add_parser(name, help=help)
    return group.add_subparsers(dest="what", required=True, parser_class=Parser, metavar="COMMAND")
