"""Benchmark: SCD training throughput (tokens/s) on the toy model, padded vs packed, side by side.

Runs the quickstart recipe (TRL SFTTrainer + PEFT LoRA) twice on the same data and model:
padded batches (the paper's configuration) and `packing: true` (TRL's BFD packing). Tokens are
the non-padding input tokens the trainer saw.

    python benchmarks/bench_train.py [--model DIR] [--steps 40]
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
    for name, extra in (("padded", []), ("packed", ["train.packing=true"])):
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
    ratio = results["packed"]["tokens_per_second"] / results["padded"]["tokens_per_second"]
    print(f"packed / padded throughput: {ratio:.2f}x")


if __name__ == "__main__":
    main()
