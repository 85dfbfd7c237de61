"""Benchmark: SCD training throughput (tokens/s) on the toy model, padded vs packed, side by side.

Runs the quickstart recipe (TRL SFTTrainer + PEFT LoRA) twice on the same data and model:
padded batches (the paper's configuration) and `packing: true` (TRL's BFD packing). Tokens are
the non-padding input tokens the trainer saw.

    python benchmarks/bench_train.py [--model DIR] [--steps 40]

``--bias-every N``: instead, the same padded training with and without ``train.eval_every_steps:
N`` (``--eval-prompts K`` validation prompts each time): what measuring bias while training costs.

    python benchmarks/bench_train.py --steps 75 --bias-every 25 --eval-prompts 60 [--select-best]

(``--select-best``: each measurement also takes the KL from the base on the neutral prompts.)
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="model dir (default: build the toy model)")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--bias-every", type=int, default=0, help="compare train.eval_every_steps")
    parser.add_argument("--eval-prompts", type=int, default=60)
    parser.add_argument("--select-best", action="store_true", help="and train.select best (KL)")
    args = parser.parse_args()

    from scd.pipeline.recipe import load_recipe
    from scd.train.trainer import train

    tmp = Path(tempfile.mkdtemp())
    model = args.model
    if model is None:
        from scd.models.toy import build_toy_model

        model = str(tmp / "toy")
        build_toy_model(model)
    results = {}
    variants = [("padded", []), ("packed", ["train.packing=true"])]
    if args.bias_every:
        bias = [
            f"train.eval_every_steps={args.bias_every}",
            f"train.eval_prompts={args.eval_prompts}",
        ]
        variants = [("plain", []), ("bias", bias + ["train.select=best"] * args.select_best)]
    for name, extra in variants:
        recipe = load_recipe(
            REPO / "recipes" / "quickstart.yaml",
            [
                f"model={model}",
                f"output_dir={tmp / name}",
                f"train.max_steps={args.steps}",
                "train.save_steps=100000",
                "wandb.enabled=false",
                *extra,
            ],
        )
        info = train(recipe, use_wandb=False)
        results[name] = info
        print(
            f"{name:>7}: {info['global_step']} steps, {info['tokens_seen']:,} tokens in "
            f"{info['train_seconds']:.1f} s = {info['tokens_per_second']:,.0f} tokens/s"
        )
    if args.bias_every:
        plain, bias = results["plain"]["train_seconds"], results["bias"]["train_seconds"]
        history = results["bias"]["bias_history"]
        inside = sum(h["eval_bias_seconds"] for h in history)
        print(
            f"bias every {args.bias_every} steps ({len(history)} measurements of "
            f"~{args.eval_prompts} prompts): {inside:.1f} s measuring = "
            f"{100 * inside / bias:.1f}% of that training's {bias:.1f} s; wall clock against "
            f"the plain run: {100 * (bias / plain - 1):+.1f}% (the machine's load included)"
        )
        return
    ratio = results["packed"]["tokens_per_second"] / results["padded"]["tokens_per_second"]
    print(f"packed / padded throughput: {ratio:.2f}x")


if __name__ == "__main__":
    main()
