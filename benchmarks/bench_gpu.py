"""GPU benchmark: a 7B Llama-2 architecture with random bf16 weights -- hf-engine scoring over the
full HolisticBias v1.0 prompt set (prompts/s, share of the GPU's bf16 peak and of a matrix
product timed in the same process) and LoRA SFT tokens/s, padded (the paper's configuration) vs
packed (TRL's BFD, padding-free), and 4-bit QLoRA packed, with the default SDPA attention.

    python benchmarks/bench_gpu.py --tokenizer ../shared/data/tokenizers/llama-2-chat \\
        --descriptors ../shared/data/holistic_bias/v1.0/descriptors.json [--out /tmp/bench-gpu]
    python benchmarks/bench_gpu.py ... --tiny      # the same steps on a tiny model (CPU check)
    python benchmarks/bench_gpu.py --model DIR --descriptors ... --limit 600 --skip-training

``--model``: score a real model (a directory, e.g. SmolLM2 as ``scd fetch-model`` converts it)
instead of the random 7B, in bfloat16 on a GPU and float32 on a CPU: on a CPU the
figures are this CPU's scoring rate as a share of a float32 matrix product timed in the same
process. Achieved FLOP/s count 2 x parameters per token read (embeddings included); executed
FLOP/s count what a second, untimed pass over the same requests ran (torch's FlopCounterMode:
every matrix product and attention, attention at its full size), divided by the timed seconds.

Random weights change no cost: the FLOPs of a forward pass depend on shapes only. A part that
cannot run (e.g. no trl/datasets on the machine) is reported, not hidden; --skip-training scores
only. Training needs trl, datasets, peft and bitsandbytes (paged AdamW). Figures: BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

# dense bf16 tensor-core peak, TFLOP/s (NVIDIA data sheets, SXM parts)
PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}


def build_model(tokenizer: Path, out: Path, tiny: bool) -> Path:
    """Llama-2-7B shapes (or tiny ones) with random bf16 weights, saved with the tokenizer."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    if (out / "config.json").is_file():
        return out
    tok = AutoTokenizer.from_pretrained(tokenizer)
    shape = (
        dict(hidden_size=64, intermediate_size=172, num_hidden_layers=2, num_attention_heads=4)
        if tiny
        else dict(
            hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32
        )
    )
    config = LlamaConfig(
        vocab_size=len(tok),
        max_position_embeddings=4096,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.eos_token_id,
        **shape,
    )
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def register_flop_formulas() -> None:
    """Formulas torch's flop counter lacks: the CPU's flash attention (the GPU kernels' product:
    torch's own formulas, registered for it) and addmm with an output dtype, which torch 2.11's
    formula cannot take."""
    import torch
    from torch.utils import flop_counter as fc

    aten = torch.ops.aten
    gpu = {  # the GPU's flash attention, forward and backward: the formulas torch counts it by
        aten._scaled_dot_product_flash_attention_for_cpu: aten._scaled_dot_product_flash_attention,
        aten._scaled_dot_product_flash_attention_for_cpu_backward: (
            aten._scaled_dot_product_flash_attention_backward
        ),
    }
    for cpu_op, gpu_op in gpu.items():
        fc.flop_registry.setdefault(cpu_op, fc.flop_registry[gpu_op])

    def addmm_flop(self_shape, a_shape, b_shape, *dtype, out_shape=None, **kwargs) -> int:
        """torch's formula, also for ``addmm(..., out_dtype=...)`` (TRL's LM-head backward on
        CUDA), whose dtype torch 2.11's counter passes as a fourth argument and then fails on."""
        return fc.mm_flop(a_shape, b_shape)

    fc.flop_registry[aten.addmm] = fc.shape_wrapper(addmm_flop)


def bench_matmul(size: int = 8192, repeats: int = 10, trials: int = 5) -> dict:
    """This device's own dense matrix-product rate, measured in the benchmark's process: bf16
    on a GPU, float32 on a CPU (2048-square: a 1024-square product's rate varies by 2x from one
    trial to the next on a 2-core CPU), the best of ``trials`` means of ``repeats`` products
    after warm-ups (the rate the machine reaches, not a trial slowed by something else)."""
    import torch

    cuda = torch.cuda.is_available()
    size = size if cuda else 2048
    dtype = torch.bfloat16 if cuda else torch.float32
    a = torch.randn(size, size, dtype=dtype, device="cuda" if cuda else "cpu")
    b = torch.randn_like(a)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(trials):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(repeats):
            a @ b
        if cuda:
            torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / repeats)
    return {
        "size": size,
        "dtype": str(dtype).removeprefix("torch."),
        "tflops": round(2 * size**3 / best / 1e12, 3),
    }


def bench_scoring(
    model: Path, descriptors: Path, out: Path, batch: int, limit: int | None, dtype: str
) -> dict:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from scd.data_gen.contact import write_prompts
    from scd.data_gen.descriptors import load_holistic_bias
    from scd.eval.benchmarks.bias.task import load_work
    from scd.eval.engines import ChoiceRequest, engine_spec
    from scd.eval.engines.hf import HFEngine
    from scd.models.formatting import Formatter, load_tokenizer

    prompts = out / "prompts"
    if not (prompts / "manifest.json").is_file():
        write_prompts(prompts, load_holistic_bias(descriptors))
    work = load_work(prompts, limit, 0)
    tok = load_tokenizer(str(model))
    fmt = Formatter(tok)
    ids = fmt.encode([f"{w['prompt']} {w['instruction']}" for w in work])
    reqs = [ChoiceRequest(tuple(i), fmt.option_ids(w["options"])) for i, w in zip(ids, work)]
    engine = HFEngine(str(model), engine_spec(dtype=dtype, batch_size=batch), tokenizer=tok)
    engine.score(reqs[: batch * 2])  # warm-up
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    engine.score(reqs)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    register_flop_formulas()
    with FlopCounterMode(display=False) as counter:  # again, untimed: the FLOPs it executes
        engine.score(reqs)
    executed = counter.get_total_flops()
    attention = sum(
        n for op, n in counter.get_flop_counts()["Global"].items() if "attention" in str(op)
    )
    params = sum(p.numel() for p in engine.model.parameters())
    tokens = sum(len(r.prompt_ids) for r in reqs) + sum(
        len(o) for r in reqs for o in r.option_ids if len(o) > 1
    )
    tflops = 2 * params * tokens / seconds / 1e12
    name = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    peak = next((v for k, v in PEAK_TFLOPS.items() if k in name), None)
    return {
        "device": name,
        "model": model.name,
        "params": params,
        "prompts": len(reqs),
        "batch_size": batch,
        "batch_size_at_end": engine.batch_size,
        "seconds": round(seconds, 1),
        "prompts_per_s": round(len(reqs) / seconds, 1),
        "tokens": tokens,
        "achieved_tflops": round(tflops, 3),
        "share_of_bf16_peak": round(tflops / peak, 3) if peak else None,
        # counted: every matrix product and attention the pass ran (the shared-prefix and
        # option passes as executed), attention at its full, not causal, size
        "executed_tflops": round(executed / seconds / 1e12, 3),
        "attention_share_of_executed": round(attention / max(executed, 1), 4),
        "executed_share_of_bf16_peak": round(executed / seconds / 1e12 / peak, 3) if peak else None,
    }


def bench_training(model: Path, descriptors: Path, out: Path, steps: int, only: list[str]) -> dict:
    from scd.pipeline.recipe import recipe_from_dict
    from scd.train.trainer import train

    shutil.copy(descriptors, out / "descriptors.json")
    results = {}
    # padded: the paper's batches; pad-free: the same rows per step as one sequence without
    # pad tokens (the same training); packed: TRL's BFD packing, rows of max_length tokens (more
    # rows per step: another training)
    variants = {
        "padded": {"padding_free": False},
        "pad-free": {"padding_free": True},
        "packed": {"packing": True},
        "qlora": {"packing": True, "quantization": "4bit"},
    }
    for name, extra in variants.items():
        if name not in only:
            continue
        quantization = extra.pop("quantization", "none")
        recipe = recipe_from_dict(
            {
                "model": str(model),
                "output_dir": str(out / "train" / f"{name}-{steps}"),
                "data": {
                    "descriptors": str(out / "descriptors.json"),
                    "setting": 1,
                    "max_train": 2000,
                    "max_eval": 50,
                },
                "train": {"max_steps": steps, "save_steps": 100000, "logging_steps": 10, **extra},
                "wandb": {"enabled": False},
                "quantization": quantization,
            },
            "bench_gpu",
        )
        try:
            info = train(recipe, use_wandb=False, progress=False)
            results[name] = {
                k: info[k] for k in ("tokens_per_second", "train_seconds", "tokens_seen")
            }
        except Exception as err:  # noqa: BLE001 -- report what could not run
            results[name] = {"error": f"{type(err).__name__}: {str(err)[:200]}"}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", help="Llama-2 tokenizer directory (without --model)")
    parser.add_argument("--descriptors", required=True, help="HolisticBias descriptors.json")
    parser.add_argument("--out", default="/tmp/bench-gpu")
    parser.add_argument("--batch-size", default="256", help="one or more, e.g. 256,1024")
    parser.add_argument("--limit", type=int, help="score ~N prompts, not all 280,800")
    parser.add_argument("--steps", default="30", help="training steps per variant, e.g. 30,90")
    parser.add_argument(
        "--variants",
        default="padded,pad-free,packed,qlora",
        help="padded (the paper's), pad-free (the same rows, no pad tokens), packed (TRL's "
        "BFD), qlora (4-bit, packed)",
    )
    parser.add_argument("--tiny", action="store_true", help="tiny shapes (a CPU check)")
    parser.add_argument("--skip-training", action="store_true")
    parser.add_argument("--model", help="a real model directory to score instead")
    args = parser.parse_args()
    if not (args.model or args.tokenizer):
        parser.error("give --tokenizer (the random 7B) or --model")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.model:
        model, dtype = Path(args.model), "auto"  # float32 on a CPU
    else:
        model, dtype = (
            build_model(
                Path(args.tokenizer),
                out / ("tiny" if args.tiny else "llama-2-7b-random"),
                args.tiny,
            ),
            "bfloat16",
        )
    report = {"matmul": bench_matmul()}
    report["scoring"] = [
        bench_scoring(model, Path(args.descriptors), out, int(batch), args.limit, dtype)
        for batch in args.batch_size.split(",")
    ]
    for row in report["scoring"]:
        for key in ("achieved", "executed"):
            row[f"{key}_share_of_measured_matmul"] = round(
                row[f"{key}_tflops"] / report["matmul"]["tflops"], 3
            )
    print(json.dumps(report, indent=1), flush=True)
    if not args.skip_training:
        report["training"] = {
            f"{name}, {steps} steps": result
            for steps in map(int, args.steps.split(","))
            for name, result in bench_training(
                model, Path(args.descriptors), out, steps, args.variants.split(",")
            ).items()
        }
        print(json.dumps(report["training"], indent=1))
    (out / "bench_gpu.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
