"""The quickstart's wall time per stage, cold, and a second recipe over the same prompts that
reuses the cached base-model evaluation (the baseline it is compared with: the cold run).

    python benchmarks/bench_quickstart.py [--out /tmp/scd-bench-quickstart]

Prints each stage's seconds for both runs, the totals, and the share of the 5-minute budget.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from scd.pipeline.launch import run_recipe
from scd.pipeline.recipe import recipe_from_dict
from scd.quickstart import QUICKSTART_RECIPE

BUDGET_S = 300


def _run(recipe: dict, run_dir: Path, cache: Path) -> tuple[float, dict[str, float]]:
    start = time.perf_counter()
    run_recipe(recipe_from_dict(recipe), run_dir, cache, progress=False, say=lambda _: None)
    total = time.perf_counter() - start
    stages = json.loads((run_dir / "state.json").read_text())["stages"]
    return total, {k: v["seconds"] for k, v in stages.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/scd-bench-quickstart")
    out = Path(parser.parse_args().out)
    shutil.rmtree(out, ignore_errors=True)
    cold_total, cold = _run(QUICKSTART_RECIPE, out / "cold", out / "cache")
    second = {**QUICKSTART_RECIPE, "data": {**QUICKSTART_RECIPE["data"], "max_train": 200}}
    warm_total, warm = _run(second, out / "second", out / "cache")
    print(f"{'stage':<24}{'cold s':>10}{'second recipe s':>18}")
    for stage in cold:
        print(f"{stage:<24}{cold[stage]:>10.1f}{warm.get(stage, float('nan')):>18.1f}")
    print(f"{'total (incl. toy model)':<24}{cold_total:>10.1f}{warm_total:>18.1f}")
    print(
        f"cold run: {cold_total / BUDGET_S:.0%} of the {BUDGET_S} s budget; "
        f"second recipe {cold_total / warm_total:.1f}x faster (toy model and base eval cached)"
    )


if __name__ == "__main__":
    main()
