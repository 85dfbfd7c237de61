"""The arena quickstart's figures as docs/guides/arena.md gives them: `scd run
recipes/arena-quickstart.yaml` with torch's threads set to each of ``--threads`` (a toy model built
afresh with them, then every arm), and each arm's held-out bias with its 95% interval, the machine
and its load -- so that the guide says what one machine gave, and another can check it.

    python benchmarks/arena_figures.py [--threads 1 2] [--seeds 0] [--out /tmp/scd-arena-figures]

Prints a Markdown table (an arm per row, a column per thread count) and whether every trained
arm's interval lies below 5% and the system prompt's and the control's above 15% (the arena
test's must-hold).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
TRAINED = ("sft", "dpo", "kto")


def machine() -> str:
    """The CPU's model name, its cores, and the load average now."""
    name = platform.processor() or platform.machine()
    lscpu = shutil.which("lscpu")
    if lscpu:
        out = subprocess.run([lscpu], capture_output=True, text=True).stdout
        named = [x.split(":", 1)[1].strip() for x in out.splitlines() if "Model name" in x]
        name = named[0] if named else name
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{name}, {os.cpu_count()} cores, load average {load}"


def run(threads: int, seeds: list[int], out: Path) -> tuple[pd.DataFrame, float]:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "SCD_THREADS": str(threads)}
    where = out / f"threads-{threads}"
    cmd = [sys.executable, "-m", "scd", "run", str(REPO / "recipes" / "arena-quickstart.yaml")]
    cmd += ["--outputs", str(where), "--run-id", "arena", "--set", f"arena.seeds={seeds}"]
    started = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, capture_output=True, text=True, cwd=REPO)
    return pd.read_csv(where / "arena" / "tables" / "arena.csv"), time.perf_counter() - started


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--out", type=Path, default=Path("/tmp/scd-arena-figures"))
    a = p.parse_args()
    shutil.rmtree(a.out, ignore_errors=True)
    print(f"machine: {machine()}")
    cells, held = {}, True
    for threads in a.threads:
        table, seconds = run(threads, a.seeds, a.out)
        print(f"threads {threads}: {seconds:.0f} s")
        for r in table.itertuples():
            seeded = len(a.seeds) > 1 and not pd.isna(getattr(r, "seed", float("nan")))
            arm = f"{r.arm} ({int(r.seed)})" if seeded else r.arm
            text = f"{r.bias_pct:.1f} [{r.bias_ci_low:.1f}, {r.bias_ci_high:.1f}]"
            cells.setdefault(arm, {})[threads] = text
            if r.arm in TRAINED:
                held &= r.bias_ci_high < 5
            elif r.arm in ("prompt", "general"):
                held &= r.bias_pct > 15
    head = " | ".join(f"{t} thread{'s' if t > 1 else ''}" for t in a.threads)
    print(f"\n| arm | {head} |\n|---|{'---|' * len(a.threads)}")
    for arm, by in cells.items():
        print(f"| {arm} | " + " | ".join(by.get(t, "–") for t in a.threads) + " |")
    print(
        "\nevery trained arm's interval below 5%, the prompt and general arms above 15%: "
        + ("yes" if held else "NO")
    )


if __name__ == "__main__":
    main()
