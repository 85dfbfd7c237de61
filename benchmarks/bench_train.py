"""Benchmark: training throughput as a share of the machine -- SFT, DPO and KTO, padded and packed.

Each configuration trains the quickstart recipe's LoRA (TRL's trainers + PEFT, float32 on a CPU)
on the same contact prompts for ``--steps`` optimizer steps, in a process of its own, and reports
tokens/s (the non-padding input tokens the trainer saw; DPO's count its chosen and rejected
sequences) and the FLOP/s the steps executed as a share of a float32 matrix product timed in the
same process (bench_gpu.bench_matmul; on a GPU, its bf16 product). The FLOPs are counted, not
estimated: torch's ``FlopCounterMode`` over one whole optimizer step (forward, backward, the
reference model's forwards of DPO and KTO, KTO's KL rows), divided by that step's tokens; it
counts matrix products and attention, attention at its full (not causal) size, and nothing else.
Step 0 is a warm-up and the counted step (and the profiled one) is not timed: the figures are the
steps after them.

    python benchmarks/bench_train.py [--model toy|DIR|GGUF] [--steps 6] [--methods sft,dpo,kto]
    python benchmarks/bench_train.py --profile \
        --model "$(scd fetch-model --no-hub smollm2-135m-instruct)"   # what bounds a step

SFT runs padded (the paper's configuration), padding-free (``train.padding_free``: the same rows
per step as one sequence without pad tokens; the same losses) and packed (TRL's BFD,
``--packed-batch`` rows of ``train.max_length`` tokens, about the tokens of a padded batch); DPO
and KTO run padded (KTO has no packing in TRL; TRL 1.16 turned DPO's padding-free mode off).
``--profile``: also torch.profiler over one step after the counted one, the ops that took the most
time.

``--head both``: each configuration twice, TRL's LM head over every token (TRL's own choice on a
CPU) and over the labelled tokens only (scd's: :func:`scd.train.setup.score_labelled_tokens_only`),
with the ratio; the FLOPs counted are the ones executed, so the first counts the head's work on
unlabelled tokens too.

``--bias-every N``: instead, the same padded SFT with and without ``train.eval_every_steps: N``
(``--eval-prompts K`` validation prompts each time): what measuring bias while training costs.

    python benchmarks/bench_train.py --steps 75 --bias-every 25 --eval-prompts 60 [--select-best]

(``--select-best``: each measurement also takes the KL from the base on the neutral prompts.)

On a GPU: ``--model DIR`` of Llama-2-7B shapes with random bf16 weights (what
``bench_gpu.build_model`` saves) under ``--recipe`` with ``--set`` overrides; ``--runs`` names each
configuration as ``method:layout`` plus ``+liger`` (Liger Kernel's fused RMSNorm, RoPE and SwiGLU
through TRL's ``use_liger_kernel``) and ``+nockpt`` (no gradient checkpointing, torch's fused
AdamW instead of the paged one); the share is then also of the dense bf16 peak. A configuration
that fails is a row with its error; the others still run.

    python benchmarks/bench_train.py --model /tmp/bench-gpu/llama-2-7b-random \
        --recipe recipes/llama-2-7b-chat/setting1.yaml --set data.descriptors=toy \
        --set data.general=scd:general --packed-batch 8 \
        --runs sft:padded,sft:packed,sft:packed+liger,sft:packed+liger+nockpt,dpo:padded,...
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "recipes" / "quickstart.yaml"
LAYOUTS = {"sft": ("padded", "pad-free", "packed"), "dpo": ("padded",), "kto": ("padded",)}
FEATURES = {  # what a configuration's "+name" adds to the recipe
    "liger": ["train.use_liger_kernel=true"],
    "nockpt": ["train.gradient_checkpointing=false", "train.optim=adamw_torch_fused"],
}


def _meter(count: int, profile: bool):
    """A TrainerCallback: the wall time and tokens of each optimizer step (end to end, data
    loading included), the FLOPs of step ``count`` by torch's ``FlopCounterMode``, and with
    ``profile`` torch.profiler over the step after it."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import TrainerCallback

    cuda = torch.cuda.is_available()

    class Meter(TrainerCallback):
        def __init__(self) -> None:
            self.steps: list[tuple[int, float, int]] = []  # (step, seconds, tokens)
            self.flops = self.flop_tokens = self.attention = 0
            self.table = ""
            self._mode = self._prof = None
            self._last = self._tokens = None

        def on_step_begin(self, args, state, control, **kwargs):
            if cuda:  # a step's kernels run after its Python returns: time them, not the launch
                torch.cuda.synchronize()
            if self._last is None:  # the first step: from here
                self._last, self._tokens = time.perf_counter(), state.num_input_tokens_seen
            if state.global_step == count:
                self._mode = FlopCounterMode(display=False)
                self._mode.__enter__()
            if profile and state.global_step == count + 1:
                self._prof = torch.profiler.profile(
                    activities=[torch.profiler.ProfilerActivity.CPU]
                )
                self._prof.__enter__()

        def on_step_end(self, args, state, control, **kwargs):
            if cuda:
                torch.cuda.synchronize()
            now, tokens = time.perf_counter(), state.num_input_tokens_seen
            step_tokens = tokens - self._tokens
            if self._mode is not None:
                self._mode.__exit__(None, None, None)
                self.flops, self.flop_tokens = self._mode.get_total_flops(), step_tokens
                ops = self._mode.get_flop_counts()["Global"]
                self.attention = sum(n for op, n in ops.items() if "attention" in str(op))
                self._mode = None
            elif self._prof is not None:
                self._prof.__exit__(None, None, None)
                averages = self._prof.key_averages()
                self.table = averages.table(sort_by="self_cpu_time_total", row_limit=12)
                self._prof = None
            elif state.global_step - 1 not in (0, count):  # the warm-up and counted steps: not
                self.steps.append((state.global_step, now - self._last, step_tokens))
            self._last, self._tokens = time.perf_counter(), state.num_input_tokens_seen

    return Meter()


def _one(method: str, layout: str, model: str, out: Path, args: argparse.Namespace) -> None:
    """Train one configuration in this process; print its figures as one JSON line."""
    import torch
    from bench_gpu import PEAK_TFLOPS, bench_matmul, register_flop_formulas  # on sys.path

    import scd.train.method_trainer as method_trainer_module
    import scd.train.trainer as trainer_module
    from scd.pipeline.recipe import load_recipe

    register_flop_formulas()
    meter = _meter(1, args.profile)
    build = trainer_module.build_trainer

    def with_meter(*args, **kwargs):
        trainer, checked = build(*args, **kwargs)
        trainer.add_callback(meter)
        return trainer, checked

    trainer_module.build_trainer = with_meter  # where train looks it up
    if args.head == "every":  # TRL's own choice on a CPU: the LM head over every token
        method_trainer_module.score_labelled_tokens_only = lambda: False
    layouts = {
        "padded": ["train.padding_free=false"],  # the paper's batches, on any device
        "pad-free": ["train.padding_free=true"],  # the same rows per step, no pad tokens
        "packed": ["train.packing=true", f"train.per_device_train_batch_size={args.packed_batch}"],
    }
    base, *features = layout.split("+")
    recipe = load_recipe(
        args.recipe,
        [
            *args.set,
            f"model={model}",
            f"output_dir={out}",
            f"train.max_steps={args.steps}",
            "train.save_steps=100000",
            "train.logging_steps=100000",
            "train.eval_every_steps=0",
            "wandb.enabled=false",
            *layouts[base],
            *(key for feature in features for key in FEATURES[feature]),
        ],
    )
    matmul = bench_matmul()
    info = trainer_module.train(recipe, method=method, use_wandb=False, progress=False)
    seconds = sum(s for _, s, _ in meter.steps)
    tokens = sum(t for _, _, t in meter.steps)
    per_token = meter.flops / max(meter.flop_tokens, 1)
    result = {
        "method": method,
        "layout": layout,
        "head": args.head,
        "steps_timed": len(meter.steps),
        "seconds": seconds,
        "tokens": tokens,
        "tokens_per_second": tokens / seconds,
        "flops_per_token": per_token,
        "attention_share_of_flops": meter.attention / max(meter.flops, 1),
        "tflops": per_token * tokens / seconds / 1e12,
        "matmul": matmul,
        "global_step": info["global_step"],
        "step_seconds": [round(s, 3) for _, s, _ in meter.steps],
    }
    result["share_of_matmul"] = result["tflops"] / matmul["tflops"]
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name()
        peak = next((v for k, v in PEAK_TFLOPS.items() if k in name), None)
        result["device"] = name
        result["peak_gpu_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
        result["share_of_bf16_peak"] = result["tflops"] / peak if peak else None
    if meter.table:
        print(meter.table, file=sys.stderr)
    print(json.dumps(result))


def _run(
    method: str, layout: str, head: str, model: str, args: argparse.Namespace, out: Path
) -> dict:
    """One configuration in a process of its own: its figures, or the error it ended with."""
    cmd = [sys.executable, __file__, "--one", f"{method}:{layout}", "--model", model]
    cmd += ["--head", head, "--recipe", str(args.recipe)]
    cmd += [f"--set={key}" for key in args.set]
    cmd += ["--out", str(out), "--steps", str(args.steps), "--packed-batch", str(args.packed_batch)]
    try:
        done = subprocess.run(
            cmd + ["--profile"] * args.profile, capture_output=True, text=True, timeout=args.timeout
        )
    except subprocess.TimeoutExpired:
        return {"method": method, "layout": layout, "head": head, "error": "timed out"}
    if done.returncode:
        why = " (killed: out of memory?)" if done.returncode == -9 else ""
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        print(f"{method} {layout} failed:\n{done.stderr[-3000:]}", file=sys.stderr, flush=True)
        error = f"exit {done.returncode}{why}: {lines[-1][:300] if lines else ''}"
        return {"method": method, "layout": layout, "head": head, "error": error}
    if args.profile:
        table = done.stderr[done.stderr.find("---") :]
        print(f"{method} {layout}, one step profiled:\n{table}", flush=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _configurations(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(method, layout) pairs: ``--runs`` as given, else every layout of each of ``--methods``."""
    if args.runs:
        return [tuple(run.partition(":")[::2]) for run in args.runs.split(",")]
    return [(method, layout) for method in args.methods.split(",") for layout in LAYOUTS[method]]


def _share_of_machine(args: argparse.Namespace, model: str, tmp: Path) -> None:
    rows = []
    heads = ["every", "labelled"] if args.head == "both" else [args.head]
    for method, layout in _configurations(args):
        for head in heads:
            out = tmp / f"{method}-{layout}-{head}"
            rows.append(_run(method, layout, head, model, args, out))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
            if args.json:  # as they come: a run cut short keeps what it measured
                args.json.write_text(json.dumps(rows, indent=1))
    done = [r for r in rows if "error" not in r]
    if done:
        matmul = done[0]["matmul"]
        print(
            f"model {Path(model).name}; {args.steps} optimizer steps each, the last "
            f"{done[0]['steps_timed']} timed; a {matmul['size']}-square {matmul['dtype']} "
            f"product: {matmul['tflops'] * 1e3:.1f} GFLOP/s (each process timed its own)"
        )
    gpu = any(r.get("share_of_bf16_peak") for r in done)
    print(
        f"{'method':<6}{'layout':>22}{'LM head':>10}{'tokens/s':>10}{'MFLOP/token':>13}"
        f"{'GFLOP/s':>10}{'attention':>10}{'share of matmul':>17}" + "  share of peak" * gpu
    )
    for r in rows:
        head = f"{r['method']:<6}{r['layout']:>22}{r['head']:>10}"
        if "error" in r:
            print(f"{head}  failed: {r['error']}")
            continue
        print(
            f"{head}{r['tokens_per_second']:>10.1f}{r['flops_per_token'] / 1e6:>13,.1f}"
            f"{r['tflops'] * 1e3:>10.1f}{r['attention_share_of_flops']:>10.1%}"
            f"{r['share_of_matmul']:>16.1%}" + (f"{r['share_of_bf16_peak']:>15.1%}" if gpu else "")
        )
    by = {(r["method"], r["layout"], r["head"]): r for r in done}
    for (method, layout, head), r in by.items():
        if head == "labelled" and (method, layout, "every") in by:
            every = by[method, layout, "every"]["tokens_per_second"]
            print(
                f"{method} {layout}: LM head over labelled tokens only / over every token: "
                f"{r['tokens_per_second'] / every:.2f}x tokens/s"
            )


def _bias_while_training(args: argparse.Namespace, model: str, tmp: Path) -> None:
    from scd.pipeline.recipe import load_recipe
    from scd.train.trainer import train

    bias = [f"train.eval_every_steps={args.bias_every}", f"train.eval_prompts={args.eval_prompts}"]
    results = {}
    for name, extra in [("plain", []), ("bias", bias + ["train.select=best"] * args.select_best)]:
        recipe = load_recipe(
            args.recipe,
            [
                *args.set,
                f"model={model}",
                f"output_dir={tmp / name}",
                f"train.max_steps={args.steps}",
                "train.save_steps=100000",
                "wandb.enabled=false",
                *extra,
            ],
        )
        results[name] = info = train(recipe, use_wandb=False)
        print(
            f"{name:>7}: {info['global_step']} steps, {info['tokens_seen']:,} tokens in "
            f"{info['train_seconds']:.1f} s = {info['tokens_per_second']:,.0f} tokens/s"
        )
    plain, bias_run = results["plain"]["train_seconds"], results["bias"]["train_seconds"]
    history = results["bias"]["bias_history"]
    inside = sum(h["eval_bias_seconds"] for h in history)
    print(
        f"bias every {args.bias_every} steps ({len(history)} measurements of "
        f"~{args.eval_prompts} prompts): {inside:.1f} s measuring = "
        f"{100 * inside / bias_run:.1f}% of that training's {bias_run:.1f} s; wall clock against "
        f"the plain run: {100 * (bias_run / plain - 1):+.1f}% (the machine's load included)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="toy (default: build it), a model dir or a GGUF file")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--methods", default="sft,dpo,kto")
    parser.add_argument("--packed-batch", type=int, default=2, help="packed rows per batch")
    parser.add_argument("--profile", action="store_true", help="and torch.profiler of a step")
    parser.add_argument(
        "--head",
        choices=["labelled", "every", "both"],
        default="labelled",
        help="TRL's LM head over the labelled tokens only (scd's setting on a CPU), over every "
        "token (TRL's own on a CPU), or both side by side",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--recipe", type=Path, default=QUICKSTART, help="default: quickstart")
    parser.add_argument("--set", action="append", default=[], help="KEY=VALUE of the recipe")
    parser.add_argument(
        "--runs",
        help="configurations instead of --methods' layouts: method:layout[+liger][+nockpt],...",
    )
    parser.add_argument("--timeout", type=float, help="seconds a configuration may take")
    parser.add_argument("--bias-every", type=int, default=0, help="compare train.eval_every_steps")
    parser.add_argument("--eval-prompts", type=int, default=60)
    parser.add_argument("--select-best", action="store_true", help="and train.select best (KL)")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child process: method:layout
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        method, layout = args.one.split(":")
        _one(method, layout, args.model, Path(args.out), args)
        return
    unknown = set(args.methods.split(",")) - set(LAYOUTS)
    if unknown:
        sys.exit(f"--methods: {', '.join(sorted(unknown))} (expected some of {', '.join(LAYOUTS)})")
    for method, layout in _configurations(args):
        base, *features = layout.split("+")
        if base not in LAYOUTS.get(method, ()) or set(features) - set(FEATURES):
            sys.exit(
                f"--runs: {method}:{layout} (expected method:layout[+feature], a layout of "
                f"{LAYOUTS}, features {', '.join(FEATURES)})"
            )
    if args.steps < 4 and not args.bias_every:
        sys.exit("--steps: at least 4 (a warm-up step, a counted one, then the timed ones)")
    tmp = Path(tempfile.mkdtemp(prefix="scd-bench-train-"))
    if args.model in (None, "toy"):
        from scd.models.toy import build_toy_model

        model = str(tmp / "toy")
        build_toy_model(model)
    else:
        from scd.models import resolve_model

        model = resolve_model(args.model)  # a GGUF converted once, before any timing
    if args.bias_every:
        _bias_while_training(args, model, tmp)
    else:
        _share_of_machine(args, model, tmp)


if __name__ == "__main__":
    main()
