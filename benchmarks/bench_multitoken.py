"""Benchmark: multi-token option scoring with a shared prompt prefix vs one sequence per option.

Real tokenizers split "Likely"/"Unlikely", "Mostly"/"Rarely" and every BBQ answer into several
tokens, so most requests take the multi-token path. Same model, same requests, side by side:

- scd:      the hf engine's shared prefix -- the prompt runs once into a KV cache repeated per
            option, each option row feeds [last prompt token] + option[:-1]
- baseline: each prompt + option as its own sequence (the engine's previous path, kept as
            ``HFEngine._score_full``), length-sorted batches of the same size

    python benchmarks/bench_multitoken.py --model PATH_OR_GGUF [--prompts 256] [--bbq DIR]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]


def _timed(fn, reqs, batch):
    start = time.perf_counter()
    out = []
    for i in range(0, len(reqs), batch):
        out += fn(reqs[i : i + batch])
    return out, time.perf_counter() - start


def request_sets(data: Path, bbq: Path, prompts: int, bbq_items: int) -> dict[str, list]:
    """The benchmarks' (user text, options) sets: ``prompts`` likelihood/frequency contact
    prompts from HolisticBias v1.0 under ``data``, and ``bbq_items`` stratified BBQ items."""
    import tempfile

    from scd.data_gen.contact import write_prompts
    from scd.data_gen.descriptors import load_holistic_bias
    from scd.eval.benchmarks.bbq.data import load_bbq, prompt_text, stratified_subset
    from scd.eval.benchmarks.bias.task import load_work

    tmp = Path(tempfile.mkdtemp())
    write_prompts(tmp / "p", load_holistic_bias(data / "holistic_bias/v1.0/descriptors.json"))
    work = [w for w in load_work(tmp / "p", prompts * 3, seed=0) if not w["baseline"]]
    return {
        "contact prompts (likelihood, frequency)": [
            (f"{w['prompt']} {w['instruction']}", w["options"])
            for w in work
            if w["scale"] != "certainty"
        ][:prompts],
        "BBQ items (3 answers)": [
            (prompt_text(r), [r["ans0"], r["ans1"], r["ans2"]])
            for r in stratified_subset(load_bbq(bbq), bbq_items, 0)
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="model dir, Hub id or .gguf")
    parser.add_argument("--prompts", type=int, default=256, help="contact prompts (multi-token)")
    parser.add_argument("--bbq", type=Path, default=REPO.parent / "shared/data/bbq/data")
    parser.add_argument("--bbq-items", type=int, default=96)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    from scd.eval.engines import ChoiceRequest, engine_spec
    from scd.eval.engines.hf import HFEngine
    from scd.models import resolve_model
    from scd.models.formatting import Formatter, load_tokenizer

    model = resolve_model(args.model)
    tok = load_tokenizer(model)
    fmt = Formatter(tok)
    spec = engine_spec(batch_size=args.batch_size)
    engine = HFEngine(model, spec, tokenizer=tok, padding_side="left")
    sets = request_sets(REPO.parent / "shared/data", args.bbq, args.prompts, args.bbq_items)
    print(
        f"model {args.model} ({model}), torch threads {torch.get_num_threads()}, "
        f"batch {args.batch_size}"
    )
    for name, items in sets.items():
        reqs = [ChoiceRequest(tuple(fmt.encode([u])[0]), fmt.option_ids(o)) for u, o in items]
        reqs.sort(key=lambda r: -len(r.prompt_ids))
        tokens = sum(len(r.prompt_ids) for r in reqs) / len(reqs)
        best = {}
        for label, fn in (("scd", engine._score_shared_prefix), ("baseline", engine._score_full)):
            runs = [_timed(fn, reqs, args.batch_size) for _ in range(2)]
            best[label] = min(runs, key=lambda r: r[1])
        diff = max(
            abs(a - b) for x, y in zip(best["scd"][0], best["baseline"][0]) for a, b in zip(x, y)
        )
        rate = {k: len(reqs) / v[1] for k, v in best.items()}
        print(f"{name}: {len(reqs)} requests, mean prompt {tokens:.0f} tokens")
        print(
            f"  baseline (one sequence per option): {best['baseline'][1]:.2f} s = "
            f"{rate['baseline']:.1f} requests/s"
        )
        print(
            f"  scd (shared prefix):                {best['scd'][1]:.2f} s = "
            f"{rate['scd']:.1f} requests/s"
        )
        print(
            f"  speed-up {rate['scd'] / rate['baseline']:.2f}x; max |score difference| {diff:.1e}"
        )


if __name__ == "__main__":
    main()
