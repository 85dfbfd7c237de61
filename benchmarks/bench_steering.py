"""Benchmark: adding a steering vector during scoring -- scd's forward hook on the decoder layer
against nnsight (a maintained intervention library) doing the same, and no steering at all, on
the same batches of the same model, side by side; and the largest difference of their logits.

    python benchmarks/bench_steering.py --model PATH_OR_GGUF [--batches 20] [--batch 16]

(nnsight: ``pip install nnsight``; it is not one of scd's dependencies.)
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def _time(fn, batches, repeats: int) -> tuple[float, list]:
    times, out = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        out = [fn(b) for b in batches]
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from nnsight import NNsight
    from transformers import AutoModelForCausalLM

    from scd.eval.steering import decoder_layers, steered
    from scd.models import resolve_model

    model = AutoModelForCausalLM.from_pretrained(resolve_model(args.model), dtype=torch.float32)
    model.eval()
    torch.set_grad_enabled(False)
    gen = torch.Generator().manual_seed(0)
    vocab, hidden = model.config.vocab_size, model.config.hidden_size
    batches = [
        torch.randint(10, vocab - 1, (args.batch, args.length), generator=gen)
        for _ in range(args.batches)
    ]
    layer = len(decoder_layers(model)) // 2
    vector = torch.randn(hidden, generator=gen)

    def plain(ids):
        return model(input_ids=ids).logits[:, -1]

    def hooked(ids):
        with steered(model, {layer: vector}):
            return model(input_ids=ids).logits[:, -1]

    wrapped = NNsight(model)

    def with_nnsight(ids):
        with wrapped.trace(ids):
            block = wrapped.model.layers[layer]
            out = block.output
            if isinstance(out, tuple):
                block.output[0][:] = out[0] + vector
            else:
                block.output[:] = out + vector
            logits = wrapped.output.logits[:, -1].save()
        return logits

    hooked(batches[0]), with_nnsight(batches[0])  # warm-up
    t_plain, base = _time(plain, batches, args.repeats)
    t_hook, a = _time(hooked, batches, args.repeats)
    t_nn, b = _time(with_nnsight, batches, args.repeats)
    diff = max((x - y).abs().max().item() for x, y in zip(a, b))
    moved = max((x - y).abs().max().item() for x, y in zip(a, base))
    seqs = args.batches * args.batch
    print(
        f"model {args.model}: {seqs} sequences of {args.length} tokens, batch {args.batch}, "
        f"layer {layer}, medians of {args.repeats}, {torch.get_num_threads()} threads"
    )
    print(f"  no steering      {t_plain:8.3f} s  ({seqs / t_plain:7.1f} seq/s)")
    print(f"  scd's hook       {t_hook:8.3f} s  ({t_hook / t_plain:5.3f}x the unsteered time)")
    print(
        f"  nnsight          {t_nn:8.3f} s  ({t_nn / t_plain:5.3f}x; "
        f"{t_nn / t_hook:5.3f}x the hook)"
    )
    print(
        f"  largest |logit difference|, hook vs nnsight: {diff:.2e} "
        f"(the vector moved them by up to {moved:.2f})"
    )


if __name__ == "__main__":
    main()
