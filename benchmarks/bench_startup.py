"""Benchmark: how long an ``scd`` command takes as a whole process, start-up included.

Times ``scd --help`` and ``scd generate contact --descriptors holistic_bias`` (every HolisticBias
v1.0 prompt set, written) over several runs, beside the interpreter alone (``python -c pass``)
and an import of what the CLI used to load before its heavy imports moved into the functions
that use them (``import scipy.stats``): median, min and max wall seconds. ``scd`` is the package
of this tree (``src`` first on ``PYTHONPATH``), not whichever one is installed.

Then, paired against an earlier release (``--baseline REF``, default ee98a27: the last main
before #79, as there are no release tags), ``scd --help`` and ``scd eval bias --help`` of this
tree and of REF checked out in a temporary ``git worktree``, run in turn (this tree, REF, REF,
this tree, ...) so that both see the same load: each side's median, min and max, and the median
of the per-pair ratios. Both run ``scd.cli.main`` from their own ``src`` with this interpreter.

    python benchmarks/bench_startup.py [--data-dir ../shared/data] [--runs 7] [--baseline REF]
    python benchmarks/bench_startup.py --baseline none   # the table alone
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "ee98a27"  # the last landed main before #79 (start-up regression); no tags exist


def _time(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env=env)
    return time.perf_counter() - start


def _times(cmd: list[str], runs: int, env: dict[str, str]) -> list[float]:
    return [_time(cmd, env) for _ in range(runs)]


def _spread(t: list[float]) -> str:
    return f"{statistics.median(t):6.3f}s {min(t):6.3f}s {max(t):6.3f}s"


def _cli(src: Path, argv: list[str]) -> list[str]:
    """``scd ARGV`` run from the package in ``src`` (ahead of any installed one)."""
    code = f"import sys; sys.path.insert(0, {str(src)!r}); from scd.cli import main; main({argv!r})"
    return [sys.executable, "-c", code]


@contextlib.contextmanager
def _checkout(ref: str) -> Iterator[Path]:
    """``ref`` checked out (detached) in a temporary git worktree, removed afterwards."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "baseline"
        git = ["git", "-C", str(ROOT), "worktree"]
        subprocess.run([*git, "add", "--detach", str(tree), ref], check=True, capture_output=True)
        try:
            yield tree
        finally:
            subprocess.run([*git, "remove", "--force", str(tree)], check=False, capture_output=True)


def _paired(ref: str, runs: int, env: dict[str, str]) -> None:
    commands = {"scd --help": ["--help"], "scd eval bias --help": ["eval", "bias", "--help"]}
    with _checkout(ref) as tree:
        print(f"\npaired: this tree vs {ref} (git worktree), {runs} runs each, in turn")
        print(f"{'command':22s} {'side':10s} {'median':>7s} {'min':>7s} {'max':>7s}")
        for name, argv in commands.items():
            new, old = _cli(ROOT / "src", argv), _cli(tree / "src", argv)
            for cmd in (new, old):  # warm-up: bytecode written, files in the page cache
                _time(cmd, env)
            t_new, t_old = [], []
            for i in range(runs):
                for cmd, out in ((new, t_new), (old, t_old))[:: 1 if i % 2 == 0 else -1]:
                    out.append(_time(cmd, env))
            ratio = statistics.median(a / b for a, b in zip(t_new, t_old))
            print(f"{name:22s} {'this tree':10s} {_spread(t_new)}")
            print(f"{'':22s} {ref:10s} {_spread(t_old)}")
            print(f"{'':22s} ratio this/{ref} (median of pairs): {ratio:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument(
        "--baseline",
        default=BASELINE,
        help=f"git ref to time side by side (default {BASELINE}, the last main before #79); "
        "none: skip",
    )
    parser.add_argument("--skip-table", action="store_true", help="the paired runs alone")
    args = parser.parse_args()
    # `python -m scd` runs this tree's package, ahead of an installed one (another checkout's)
    path = os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "SCD_DATA_DIR": str(args.data_dir), "PYTHONPATH": path}
    print(f"load average (1, 5, 15 min) at the start: {os.getloadavg()}")
    scd = [sys.executable, "-m", "scd"]
    with tempfile.TemporaryDirectory() as tmp:
        commands = {
            "python -c pass (the interpreter alone)": [sys.executable, "-c", "pass"],
            "python -c 'import scipy.stats'": [sys.executable, "-c", "import scipy.stats"],
            "scd --help": [*scd, "--help"],
            "scd generate contact --descriptors holistic_bias": [
                *scd,
                "generate",
                "contact",
                "--descriptors",
                "holistic_bias",
                "--out",
                tmp,
            ],
        }
        if not args.skip_table:
            print(f"{'command':52s} {'median':>7s} {'min':>7s} {'max':>7s}  ({args.runs} runs)")
            for name, cmd in commands.items():
                print(f"{name:52s} {_spread(_times(cmd, args.runs, env))}")
    if args.baseline != "none":
        _paired(args.baseline, args.runs, env)
    print(f"load average (1, 5, 15 min) at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
