"""The command line: every option explains itself, and a mistyped flag is named."""

from __future__ import annotations

import argparse
import contextlib
import io

import pytest

from scd.cli import build_parser, main


def _parsers(parser: argparse.ArgumentParser, name: str = "scd"):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, p in action.choices.items():
                yield from _parsers(p, f"{name} {sub}")


def test_every_option_has_help_and_shows_its_default():
    for name, parser in _parsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            assert action.help, f"{name} {action.option_strings or action.dest}: no help"
    text = dict(_parsers(build_parser()))["scd eval bias"].format_help()
    assert "(default: 512)" in text and "(default: choice)" in text
    assert "(default: None)" not in text


def _run(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    return code, err.getvalue()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["eval", "bias", "--model", "m", "--prompts", "p", "--ouput", "o"],
         "unrecognized arguments: --ouput (did you mean --out?)"),
        (["eval", "bias", "--ouput", "o"], "--ouput (did you mean --out?)"),
        (["eval", "bias", "--model", "m", "--prompts", "p", "--out", "o", "--limt", "3"],
         "--limt (did you mean --limit?)"),
        (["train", "r.yaml", "--sett", "a=b"], "--sett (did you mean --set?)"),
        (["eval", "bias", "--model", "m"], "the following arguments are required: --prompts"),
    ],
)  # fmt: skip
def test_a_mistyped_flag_is_named_before_a_missing_one(argv, expected):
    code, err = _run(argv)
    assert code == 2 and expected in err and err.count("\n") == 1


def test_quickstart_help_says_what_where_and_how_long():
    text = dict(_parsers(build_parser()))["scd quickstart"].format_help()
    for words in ("toy", "planted", "report", "--out", "outputs/quickstart", "minutes"):
        assert words in text
