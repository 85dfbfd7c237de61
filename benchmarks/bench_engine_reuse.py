"""One evaluation engine per run vs one per evaluation stage: the quickstart sweep of settings 1-8.

    python benchmarks/bench_engine_reuse.py [--out /tmp/scd-bench-engine] [--backend hf]

Trains the 8 settings once (not timed), then runs the evaluation stages (the base model on every
prompt + each adapter on its held-out prompts) twice from the same adapters: with a fresh engine
per stage (the baseline; what ``scd run`` did before) and with one shared engine. Prints the
wall time of the evaluation stages, how many times a model was loaded, and the ratio; the saving
grows with the load time of the model (seconds for the toy model, minutes for a 13B on vLLM).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import scd.eval.engines as engines
from scd.pipeline.launch import run_recipe
from scd.pipeline.recipe import recipe_from_dict
from scd.quickstart import QUICKSTART_RECIPE


def _reset_evaluations(run_dir: Path, cache: Path) -> None:
    """Forget every evaluation stage (and the cached base evaluation); keep the adapters."""
    state = json.loads((run_dir / "state.json").read_text())
    kept = {k: v for k, v in state["stages"].items() if "eval" not in k and k != "base/bias"}
    kept = {k: v for k, v in kept.items() if k not in ("report", "wandb")}
    (run_dir / "state.json").write_text(json.dumps({"stages": kept}))
    for path in run_dir.glob("setting-*/arm-*/eval"):  # every arm's
        shutil.rmtree(path)
    shutil.rmtree(cache / "base", ignore_errors=True)


def _evaluate(recipe, run_dir: Path, cache: Path, share: bool) -> tuple[float, int, dict]:
    loads = []
    make = engines.make_engine

    def counting(*args, **kwargs):  # noqa: ANN002, ANN003
        loads.append(args[0])
        return make(*args, **kwargs)

    engines.make_engine = counting
    import scd.eval.tasks as eval_runner

    eval_runner.make_engine = counting
    try:
        start = time.perf_counter()
        run_recipe(recipe, run_dir, cache, progress=False, say=lambda _: None, share_engine=share)
        seconds = time.perf_counter() - start
    finally:
        engines.make_engine = eval_runner.make_engine = make
    stages = json.loads((run_dir / "state.json").read_text())["stages"]
    evals = {k: v["seconds"] for k, v in stages.items() if "eval" in k or k == "base/bias"}
    return seconds, len(loads), evals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/scd-bench-engine")
    parser.add_argument("--backend", default="hf")
    args = parser.parse_args()
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    data = {
        **QUICKSTART_RECIPE,
        "eval": {**QUICKSTART_RECIPE["eval"], "backend": args.backend},
        "run": {"name": "sweep", "settings": [1, 2, 3, 4, 5, 6, 7, 8]},
    }
    recipe = recipe_from_dict(data, "bench")
    run_dir, cache = out / "sweep", out / "cache"
    start = time.perf_counter()
    run_recipe(recipe, run_dir, cache, progress=False, say=lambda _: None)
    print(f"sweep trained and evaluated once (not compared): {time.perf_counter() - start:.0f} s")
    results = {}
    for share in (False, True):
        _reset_evaluations(run_dir, cache)
        results[share] = _evaluate(recipe, run_dir, cache, share)
    print(f"{'evaluation stages':<34}{'engine per stage':>18}{'one engine':>12}")
    (t0, n0, s0), (t1, n1, s1) = results[False], results[True]
    print(f"{'model loads':<34}{n0:>18}{n1:>12}")
    print(f"{'sum of evaluation stages, s':<34}{sum(s0.values()):>18.1f}{sum(s1.values()):>12.1f}")
    print(f"{'wall (evaluations + report), s':<34}{t0:>18.1f}{t1:>12.1f}")
    print(f"one engine: {sum(s0.values()) / sum(s1.values()):.2f}x faster evaluation stages")


if __name__ == "__main__":
    main()
