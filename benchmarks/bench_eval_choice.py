"""Benchmark: `choice` scoring throughput against a per-prompt `generate` loop, side by side.

Same model (the planted-bias toy model, built offline unless --model is given), same prompts:

- choice:   scd's HF engine, batched option scoring (one forward per prompt, length-sorted batches)
- baseline: one `model.generate(max_new_tokens=8)` call per prompt, answer parsed from the text

    python benchmarks/bench_eval_choice.py [--model DIR] [--prompts N] [--batch-size 64]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from importlib.resources import files
from pathlib import Path

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="model dir (default: build the toy model)")
    parser.add_argument("--prompts", type=int, default=4000, help="prompts for choice mode")
    parser.add_argument("--baseline-prompts", type=int, default=300, help="prompts for the loop")
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()

    from scd.data_gen.contact import write_prompts
    from scd.data_gen.descriptors import load_holistic_bias
    from scd.eval.benchmarks.bias.task import load_work
    from scd.eval.engines import ChoiceRequest, engine_spec
    from scd.eval.engines.hf import HFEngine
    from scd.models.formatting import Formatter, load_tokenizer, parse_answer

    tmp = Path(tempfile.mkdtemp())
    model = args.model
    if model is None:
        from scd.models.toy import build_toy_model

        model = str(tmp / "toy")
        build_toy_model(model)
    descriptors = Path(str(files("scd.data_gen") / "data" / "toy_descriptors.json"))
    write_prompts(tmp / "prompts", load_holistic_bias(descriptors))
    work = [w for w in load_work(tmp / "prompts", args.prompts, seed=0) if not w["baseline"]]
    tokenizer = load_tokenizer(model)
    fmt = Formatter(tokenizer)
    engine = HFEngine(model, engine_spec(batch_size=args.batch_size), tokenizer=tokenizer)
    device = engine.device
    users = [f"{w['prompt']} {w['instruction']}" for w in work]

    start = time.perf_counter()
    ids = fmt.encode(users)
    requests = [ChoiceRequest(tuple(i), fmt.option_ids(w["options"])) for i, w in zip(ids, work)]
    scores = engine.score(requests)
    choice_s = time.perf_counter() - start
    choice_rate = len(work) / choice_s
    chosen = [w["options"][s.index(max(s))] for w, s in zip(work, scores)]

    n = min(args.baseline_prompts, len(work))
    start = time.perf_counter()
    agree = 0
    with torch.inference_mode():
        for k in range(n):
            input_ids = torch.tensor([ids[k]], device=device)
            new = engine.model.generate(
                input_ids=input_ids,
                attention_mask=torch.ones_like(input_ids),
                max_new_tokens=8,
                do_sample=False,
                pad_token_id=engine.pad_id,
            )[0, input_ids.shape[1] :]
            text = tokenizer.decode(new.tolist(), skip_special_tokens=True)
            agree += parse_answer(text, work[k]["options"]) == chosen[k]
    loop_s = time.perf_counter() - start
    loop_rate = n / loop_s

    print(f"model {model} on {device}, torch threads {torch.get_num_threads()}")
    print(
        f"choice (batched scoring): {len(work):,} prompts in {choice_s:.2f} s = "
        f"{choice_rate:,.0f} prompts/s"
    )
    print(
        f"baseline (per-prompt generate, 8 new tokens): {n:,} prompts in {loop_s:.2f} s = "
        f"{loop_rate:,.1f} prompts/s"
    )
    print(
        f"speed-up: {choice_rate / loop_rate:.1f}x (target >= 20x, aim >= 50x); "
        f"answers agree on {agree}/{n}"
    )


if __name__ == "__main__":
    main()
