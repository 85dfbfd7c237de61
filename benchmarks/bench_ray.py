"""The quickstart sweep of settings 1-8: the local launcher vs Ray with 2 workers, side by side.

    python benchmarks/bench_ray.py [--out /tmp/scd-bench-ray] [--cpus 2]

Both runs start from the same cached toy model and an empty evaluation cache, and must end with
the same tables. Prints the wall times, their ratio, and the busy time of the tasks (the sum of
their stages), which bounds what more workers could gain.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from scd.models.toy import ensure_toy_model
from scd.pipeline.launch import run_recipe
from scd.pipeline.recipe import recipe_from_dict
from scd.quickstart import QUICKSTART_RECIPE


def _tables(run: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((run / "tables").glob("*.csv"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/scd-bench-ray"))
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray cluster")
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    data = {
        **QUICKSTART_RECIPE,
        "wandb": {"enabled": False},
        "run": {"name": "sweep", "settings": list(range(1, 9))},
    }
    recipe = recipe_from_dict(data, "bench")
    toy = ensure_toy_model(recipe.toy_model, args.out / "toy-cache", say=lambda _: None)
    import ray

    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    wall, busy = {}, {}
    for launcher in ("local", "ray"):
        root = args.out / launcher
        shutil.copytree(toy.parent, root / "cache" / "toy-model")
        started = time.perf_counter()
        run_recipe(
            recipe,
            root / "sweep",
            root / "cache",
            progress=False,
            say=lambda _: None,
            launcher=launcher,
        )
        wall[launcher] = time.perf_counter() - started
        stages = json.loads((root / "sweep" / "state.json").read_text())["stages"]
        busy[launcher] = sum(
            v["seconds"] for k, v in stages.items() if k.startswith(("setting-", "base/"))
        )
    same = _tables(args.out / "local" / "sweep") == _tables(args.out / "ray" / "sweep")
    print("| launcher | wall s | ratio to local | stage time s (sum over tasks) |")
    print("|---|---|---|---|")
    for launcher, seconds in wall.items():
        print(
            f"| {launcher} | {seconds:.1f} | {seconds / wall['local']:.2f} | {busy[launcher]:.1f} |"
        )
    print(f"\nsame tables: {same}; Ray cluster: {args.cpus} CPUs, one task per CPU")


if __name__ == "__main__":
    main()
