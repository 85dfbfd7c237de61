"""``scd data list|fetch|verify``: the reference datasets scd reads (:mod:`scd.reference_data`),
their arguments and what each does.

    scd data list                 # each dataset: its source, licence, and whether it is here
    scd data fetch crows_pairs    # fetched into $SCD_DATA_DIR/crows_pairs and verified
    scd data verify all           # every file present checked against its pinned checksum
"""

from __future__ import annotations

import argparse

from scd.errors import InputError

__all__ = ["add_data", "data_fetch", "data_list", "data_verify"]


def add_data(sub: argparse._SubParsersAction, parser_class: type) -> None:
    """The ``scd data`` command group."""
    group = sub.add_parser("data", help="the reference datasets: list, fetch, verify")
    what = group.add_subparsers(dest="what", required=True, parser_class=parser_class)
    what.add_parser("list", help="each dataset, its pinned source and licence, and what is here")
    for name, text in (
        ("fetch", "fetch a dataset's missing files into $SCD_DATA_DIR/<name> and verify them"),
        ("verify", "check each file present against its pinned checksum"),
    ):
        action = what.add_parser(name, help=text)
        action.add_argument("name", help="a dataset (scd data list) or all")


def _names(name: str) -> list[str]:
    from scd.reference_data import catalog, dataset

    return list(catalog()) if name == "all" else [dataset(name).name]


def data_list(args: argparse.Namespace) -> None:
    from scd.reference_data import catalog, verify

    for d in catalog().values():
        rows = verify(d.name)
        here = sum(r["status"] == "ok" for r in rows)
        print(
            f"{d.name}: {here}/{len(rows)} files in {d.where()}; github.com/{d.repo} @ "
            f"{d.commit[:7]}; {d.licence}; {d.citation}"
        )


def data_fetch(args: argparse.Namespace) -> None:
    from scd.progress import say
    from scd.reference_data import fetch

    for name in _names(args.name):
        print(f"{name}: {fetch(name, say=say)}")


def data_verify(args: argparse.Namespace) -> None:
    from scd.reference_data import verify

    bad = []
    for name in _names(args.name):
        rows = verify(name)
        for r in rows:
            print(f"{name}/{r['path']}: {r['status']}")
        bad += [f"{name}/{r['path']}" for r in rows if r["status"] not in ("ok", "missing")]
    if bad:
        raise InputError(f"{len(bad)} file(s) are not the pinned ones: {', '.join(bad)}")
