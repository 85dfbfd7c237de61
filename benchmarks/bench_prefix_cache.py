"""Benchmark: the hf engine's prefix cache across prompts, on and off, side by side.

The same engine, model and requests scored with ``prefix_cache`` on (requests sorted by token
ids; the head a batch's prompts share computed once and its KV cache repeated per row) and off
(length-sorted batches, every prompt computed whole), alternating, best of ``--repeats``; for
each set of requests: prompts/s both ways, the speed-up, the largest log-probability difference
and whether every choice is the same. The request sets are the contact prompts under
``--protocol scd`` (the chat template alone), under ``--protocol paper`` (Llama 2's system
prompt and the instruction wrapper, ~150 tokens of shared head) and the arena's ``prompt`` arm
(scd's text after the debiasing system prompt).

    python benchmarks/bench_prefix_cache.py --model PATH_OR_GGUF [--prompts 96] [--batch 32]

``--llama LAYERS:HIDDEN`` measures a Llama of that shape instead, its weights random (speed
depends on the shapes alone) and the Llama 3.1 tokenizer of the reference data (128k tokens):
small models with large vocabularies, where the cache's gain is least.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def request_sets(model: str, data: Path, prompts: int) -> dict[str, list]:
    """The request sets named above: ``prompts`` stratified contact prompts each (HolisticBias
    v1.0 under ``data``; all three scales, so single- and multi-token options)."""
    import tempfile

    from scd.data_gen.contact import write_prompts
    from scd.data_gen.descriptors import load_holistic_bias
    from scd.eval.benchmarks.bias.task import load_work
    from scd.eval.engines import ChoiceRequest
    from scd.models.formatting import Formatter, load_tokenizer
    from scd.models.protocols import PROTOCOLS, PromptProtocol
    from scd.train.arms.untrained import DEBIAS_PROMPT

    tmp = Path(tempfile.mkdtemp())
    write_prompts(tmp / "p", load_holistic_bias(data / "holistic_bias/v1.0/descriptors.json"))
    rows = [w for w in load_work(tmp / "p", prompts, seed=0) if not w["baseline"]][:prompts]
    fmt = Formatter(load_tokenizer(model))
    protocols: dict[str, PromptProtocol] = {
        "--protocol scd": PROTOCOLS["scd"],
        "--protocol paper": PROTOCOLS["paper"],
    }
    sets = {}
    for name, protocol in protocols.items():
        ids = protocol.prompt_ids(fmt, rows)
        sets[name] = [
            ChoiceRequest(tuple(i), protocol.option_ids(fmt, r["options"]))
            for i, r in zip(ids, rows)
        ]
    arm = Formatter(fmt.tokenizer, system_prompt=DEBIAS_PROMPT)
    ids = arm.encode([f"{r['prompt']} {r['instruction']}" for r in rows])
    sets["the prompt arm"] = [
        ChoiceRequest(tuple(i), arm.option_ids(r["options"])) for i, r in zip(ids, rows)
    ]
    return sets


def random_llama(shape: str, data: Path) -> str:
    """A Llama of ``LAYERS:HIDDEN`` with random weights and the Llama 3.1 tokenizer, saved to a
    temporary directory; its path."""
    import tempfile

    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    layers, hidden = (int(x) for x in shape.split(":"))
    tok = AutoTokenizer.from_pretrained(data / "tokenizers" / "llama-3.1-instruct")
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=hidden * 11 // 4,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        num_key_value_heads=max(1, hidden // 256),
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    torch.manual_seed(0)
    out = Path(tempfile.mkdtemp()) / f"llama-{layers}x{hidden}"
    LlamaForCausalLM(config).save_pretrained(out)
    tok.save_pretrained(out)
    return str(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--model", help="model directory or GGUF file")
    what.add_argument("--llama", metavar="LAYERS:HIDDEN", help="a random Llama of this shape")
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--prompts", type=int, default=96)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    import torch

    from scd.eval.engines import engine_spec
    from scd.eval.engines.hf import HFEngine
    from scd.models.resolve import resolve_model

    model = random_llama(args.llama, args.data) if args.llama else str(resolve_model(args.model))
    engine = HFEngine(model, engine_spec(device="cpu", dtype="float32", batch_size=args.batch))
    params = sum(p.numel() for p in engine.model.parameters()) / 1e6
    sets = request_sets(model, args.data, args.prompts)
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch "
        f"{torch.__version__}, {torch.get_num_threads()} threads; {Path(model).name} "
        f"({params:.1f}M parameters), float32, batches of {args.batch}, best of {args.repeats}; "
        f"load {os.getloadavg()[0]:.2f} at start"
    )
    print(
        "| requests | prompt tokens (mean) | off: prompts/s | on: prompts/s | speed-up | "
        "max log-prob diff | same choices |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, requests in sets.items():
        best = {True: float("inf"), False: float("inf")}
        scores = {}
        for _ in range(args.repeats):
            for cached in (False, True):
                engine.prefix_cache = cached
                start = time.perf_counter()
                scores[cached] = engine.score(requests)
                best[cached] = min(best[cached], time.perf_counter() - start)
        diff = max(abs(a - b) for x, y in zip(scores[True], scores[False]) for a, b in zip(x, y))
        same = all(x.index(max(x)) == y.index(max(y)) for x, y in zip(scores[True], scores[False]))
        tokens = sum(len(r.prompt_ids) for r in requests) / len(requests)
        rate = {k: len(requests) / v for k, v in best.items()}
        print(
            f"| {len(requests)} contact prompts, {name} | {tokens:.0f} | {rate[False]:.2f} | "
            f"{rate[True]:.2f} | **{rate[True] / rate[False]:.2f}×** | {diff:.1e} | {same} |",
            flush=True,
        )
    print(f"load {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
