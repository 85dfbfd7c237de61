"""Benchmark: how long an ``scd`` command takes as a whole process, start-up included.

Times ``scd --help`` and ``scd generate contact --descriptors holistic_bias`` (every HolisticBias
v1.0 prompt set, written) over several runs, beside the interpreter alone (``python -c pass``)
and an import of what the CLI used to load before its heavy imports moved into the functions
that use them (``import scipy.stats``): median, min and max wall seconds.

    python benchmarks/bench_startup.py [--data-dir ../shared/data] [--runs 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _times(cmd: list[str], runs: int, env: dict[str, str]) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, env=env)
        out.append(time.perf_counter() - start)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    env = {**os.environ, "SCD_DATA_DIR": str(args.data_dir)}
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
        print(f"{'command':52s} {'median':>8s} {'min':>8s} {'max':>8s}  ({args.runs} runs)")
        for name, cmd in commands.items():
            t = _times(cmd, args.runs, env)
            print(f"{name:52s} {statistics.median(t):7.2f}s {min(t):7.2f}s {max(t):7.2f}s")
    print(f"load average (1 min) at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
