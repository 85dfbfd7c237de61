"""The documentation's references, generated so that they cannot drift from the code: every
recipe key from the option dataclasses (type, default, help, whether a run holds it fixed) and
every command from the argument parser (``docs/hooks.py`` builds both pages of the site from
these)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import typing
from collections.abc import Iterator, Mapping
from typing import Any

from scd.config.arms import arena_spec_class
from scd.config.engine import ENGINES, engine_class
from scd.config.schema import EvalSpec, Recipe, eval_spec_class

__all__ = ["cli_reference", "recipe_keys", "recipe_reference"]

# what a key without a help of its own is, by the section it is in
_LIBRARY = {
    "TrainSpec": "TRL's `SFTConfig` key of this name",
    "LoraSpec": "PEFT's `LoraConfig`: `r`, `lora_alpha`, `lora_dropout`, `target_modules`",
}


def _type_name(tp: Any) -> str:
    text = tp.__name__ if isinstance(tp, type) else str(tp)
    return text.replace("typing.", "").replace("NoneType", "None")


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return "(required)"


def recipe_keys(
    cls: type = Recipe, sections: Mapping[str, type] | None = None, prefix: str = ""
) -> Iterator[dict[str, Any]]:
    """Every key of a recipe, sections first-class: ``{key, type, default, help, fixed}``
    (``fixed``: a run directory holds it fixed, :func:`scd.config.loader.fixed_part`; speed
    options and tracking are only recorded). ``sections``: the benchmarks' options classes of
    the ``eval`` section."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if not f.metadata.get("key", True):
            continue
        tp = hints[f.name]
        if cls is Recipe and f.name in ("eval", "arena"):  # made from what is registered
            tp = eval_spec_class(sections) if f.name == "eval" else arena_spec_class()
        key = prefix + f.name
        if f.metadata.get("spread"):  # open: any field of a library's config
            help_ = f.metadata.get("help", "")
            yield {
                "key": f"{prefix}*",
                "type": "TRL's",
                "default": None,
                "shown": "TRL's",
                "help": help_,
                "fixed": True,
            }
            continue
        if dataclasses.is_dataclass(tp):
            if f.metadata.get("speed"):  # a whole section a run never holds fixed
                yield {"key": key, "section": True, "fixed": False}
            rows = list(recipe_keys(tp, sections, key + "."))
            if cls is Recipe and f.name == "eval":  # each engine's own keys, then sections
                own = [r for r in rows if "." not in r["key"].removeprefix(key + ".")]
                shared = [r for r in own if r["key"].removeprefix(key + ".") in _SHARED]
                rows = shared + list(_engine_keys(key + ".")) + rows[len(own) :]
            yield from rows
            continue
        yield {
            "key": key,
            "type": _type_name(tp),
            "default": _default(f),
            "help": f.metadata.get("help") or _LIBRARY.get(cls.__name__, ""),
            "fixed": not f.metadata.get("speed"),
        }


_SHARED = {f.name for f in dataclasses.fields(EvalSpec)}  # every engine's keys, shards


def _engine_keys(prefix: str) -> Iterator[dict[str, Any]]:
    """Each engine's own keys (``eval.backend`` chooses the engine), said as whose they are."""
    seen = set(_SHARED)
    for name in ENGINES:
        for row in recipe_keys(engine_class(name).Options, None, prefix):
            if row["key"].removeprefix(prefix) not in seen:
                seen.add(row["key"].removeprefix(prefix))
                yield {**row, "help": f"backend {name}: {row['help']}"}


TABLE_RULE = "|---|---|---|---|---|"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _prose(text: Any) -> str:
    """A help text as a table cell outside code: ``<run_id>`` shown, not read as an HTML tag."""
    return _cell(text).replace("<", "&lt;").replace(">", "&gt;")


def recipe_reference(sections: Mapping[str, type] | None = None) -> str:
    """The recipe reference page (Markdown): one table per section."""
    out = [
        "# Recipe keys",
        "",
        "Every key a recipe (`scd train`, `scd run`) takes, generated from scd's option classes. "
        "`--set KEY=VALUE` sets any of them on the command line. A run directory holds its "
        "**fixed** keys: it refuses to resume under other values of them; the others "
        "(speed, memory, tracking, the Hub) are recorded only. Which options enter each "
        "result's own identity (`run.json`, the cache key) is another, narrower list: "
        'ARCHITECTURE.md, "What identifies a result".',
    ]
    rows = list(recipe_keys(sections=sections))
    unfixed = [row["key"] + "." for row in rows if row.get("section")]
    keys = [row for row in rows if not row.get("section")]
    keys.sort(key=lambda row: "." in row["key"])  # the top level first, sections in order
    section = None
    for row in keys:
        head = row["key"].rsplit(".", 1)[0] if "." in row["key"] else None
        if head != section or row is keys[0]:
            section = head
            title = f"## `{head}`" if head else "## Top level"
            out += ["", title, "", "| key | type | default | fixed | what it is |", TABLE_RULE]
        fixed = row["fixed"] and not any(row["key"].startswith(p) for p in unfixed)
        out.append(
            f"| `{row['key']}` | {_cell(row['type'])} | "
            f"{row.get('shown') or '`' + _cell(repr(row['default'])) + '`'} | "
            f"{'yes' if fixed else 'no'} | {_prose(row['help'])} |"
        )
    return "\n".join(out) + "\n"


def _commands(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, str]]:
    yield path, parser.format_help()
    for action in parser._actions:  # argparse keeps subcommands only here
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, f"{path} {name}")


def cli_reference(parser: argparse.ArgumentParser) -> str:
    """The command-line reference page (Markdown): every command's ``--help``, as printed at
    80 columns (the width the site's code blocks show without scrolling)."""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "80"
    try:
        pages = list(_commands(parser, "scd"))
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old
    out = ["# Command line", "", "Every `scd` command's `--help`, generated from its parser."]
    for path, text in pages:
        out += ["", f"## `{path}`", "", "```text", text.rstrip(), "```"]
    return "\n".join(out) + "\n"
