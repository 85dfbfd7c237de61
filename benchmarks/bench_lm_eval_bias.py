"""Benchmark: ``scd eval bias`` against lm-evaluation-harness on the same documents, side by side.

The same contact prompts (``--limit`` of them, HolisticBias v1.0 from the reference data), the
same model and the same thread count, timed as a user runs them -- whole commands, model loading
included, alternating, best of ``--repeats``:

- ``scd eval bias --limit N`` with the prefix cache (the default) and with ``--no-prefix-cache``;
- lm-eval 0.4.13's ``hf`` model on the task directory ``scd export lm-eval --limit N`` writes
  (the same documents; ``--apply_chat_template``, ``--batch_size`` as scd's).

It prints each command's best wall time, the documents per second, lm-eval's time over each of
scd's, and both tools' bias % (the same documents scored by two implementations: they should
agree). The default model is a Llama of ``--llama LAYERS:HIDDEN`` (4:256) with random weights and
the Llama 3.1 tokenizer (128k tokens): a small model with a large vocabulary, where scd's
batching gains least; ``--model`` takes a real one.

    python benchmarks/bench_lm_eval_bias.py [--limit 1000] [--llama 4:256 | --model M] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_prefix_cache import random_llama  # noqa: E402  (benchmarks/ is not a package)


def _timed(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{' '.join(command[:4])} ... failed:\n{done.stderr[-2000:]}")
    return time.perf_counter() - start


def _lm_eval_bias(results: Path) -> float:
    """The ``scd_contact`` group's bias % from lm-eval's results file."""
    found = sorted(results.rglob("results_*.json"))[-1]
    groups = json.loads(found.read_text())["results"]
    return groups["scd_contact"]["bias,none"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--model", help="model directory or GGUF file")
    what.add_argument("--llama", default="4:256", metavar="LAYERS:HIDDEN")
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--limit", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()

    from scd.models.resolve import resolve_model

    model = str(resolve_model(args.model)) if args.model else random_llama(args.llama, args.data)
    tmp = Path(tempfile.mkdtemp())
    env = {
        **os.environ,
        "SCD_DATA_DIR": str(args.data),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "SCD_THREADS": str(args.threads),
        "OMP_NUM_THREADS": str(args.threads),
        "TOKENIZERS_PARALLELISM": "false",
    }
    scd = [sys.executable, "-m", "scd"]
    prompts, tasks = tmp / "prompts", tmp / "tasks"
    hb = "holistic_bias"
    subprocess.run(
        [*scd, "generate", "contact", "--descriptors", hb, "--out", str(prompts)],
        env=env,
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [
            *scd,
            "export",
            "lm-eval",
            "--prompts",
            str(prompts),
            "--limit",
            str(args.limit),
            "--out",
            str(tasks),
        ],
        env=env,
        check=True,
        capture_output=True,
    )
    common = [
        "--model",
        model,
        "--prompts",
        str(prompts),
        "--limit",
        str(args.limit),
        "--device",
        "cpu",
        "--dtype",
        "float32",
        "--batch-size",
        str(args.batch),
        "--quiet",
    ]
    commands = {
        "scd eval bias (prefix cache)": [*scd, "eval", "bias", *common],
        "scd eval bias --no-prefix-cache": [*scd, "eval", "bias", *common, "--no-prefix-cache"],
        "lm_eval --model hf": [
            sys.executable,
            "-m",
            "lm_eval",
            "--model",
            "hf",
            "--model_args",
            f"pretrained={model},dtype=float32",
            "--device",
            "cpu",
            "--batch_size",
            str(args.batch),
            "--include_path",
            str(tasks),
            "--tasks",
            "scd_contact,scd_contact_baseline",
            "--apply_chat_template",
        ],
    }
    best = {name: float("inf") for name in commands}
    outs = {name: tmp / f"out-{i}" for i, name in enumerate(commands)}
    for r in range(args.repeats):
        for name, command in commands.items():
            out = outs[name] / f"repeat-{r}"
            flag = ["--output_path", str(out)] if "lm_eval" in command else ["--out", str(out)]
            best[name] = min(best[name], _timed([*command, *flag], env))
    documents = sum(json.loads((tasks / "manifest.json").read_text())["tasks"].values())
    scd_summary = json.loads(
        (outs["scd eval bias (prefix cache)"] / "repeat-0" / "summary.json").read_text()
    )
    lm_bias = _lm_eval_bias(outs["lm_eval --model hf"] / "repeat-0")
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"{args.threads} threads; {Path(model).name}, float32, batches of {args.batch}, "
        f"--limit {args.limit}: {documents} documents (the baselines too), best of "
        f"{args.repeats}; load {os.getloadavg()[0]:.2f} at the end"
    )
    print("| command | best wall s | documents/s | lm-eval's time over this |")
    print("| --- | --- | --- | --- |")
    for name, seconds in best.items():
        ratio = best["lm_eval --model hf"] / seconds
        print(f"| {name} | {seconds:.1f} | {documents / seconds:.1f} | **{ratio:.2f}×** |")
    print(f"bias %: scd {scd_summary['overall']['pct']:.2f}, lm-eval {lm_bias:.2f}")


if __name__ == "__main__":
    main()
