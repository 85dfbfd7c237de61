"""Benchmark: generate and write every HolisticBias v1.0 contact prompt set.

Prints wall time and peak memory of ``write_prompts`` (Arrow kernels) side by side with a naive
baseline that renders row by row in Python and builds the table with ``Table.from_pylist``.

    python benchmarks/bench_generate.py [--data-dir ../shared/data] [--repeat 3]

Each variant runs in its own process so that peak memory (ru_maxrss) is its own.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run_variant(variant: str, data_dir: Path, out: Path) -> dict:
    import resource

    import pyarrow as pa
    import pyarrow.parquet as pq

    from scd.data_gen.contact import write_prompts
    from scd.data_gen.descriptors import load_holistic_bias
    from scd.data_gen.templates import CONTACTS, compile_prompt, load_scales, load_templates

    start = time.perf_counter()
    descriptors = load_holistic_bias(data_dir / "holistic_bias/v1.0/descriptors.json")
    if variant == "scd":
        info = write_prompts(out, descriptors)
        n = info["n_prompts"]
    else:  # naive: one dict per row, rendered in Python
        scales, rows = load_scales(), []
        for t in load_templates():
            for a in ("positive", "negative"):
                for s, scale in scales.items():
                    unbiased, biased = scale.answers(a)
                    for d in descriptors.descriptors:
                        for c in CONTACTS:
                            comp = compile_prompt(t, c, a, scale)
                            mentions = [d.group(noun) for noun in comp.nouns] + [""]
                            rows.append(
                                {
                                    "principle": t.principle,
                                    "scenario": t.scenario,
                                    "action": a,
                                    "scale": s,
                                    "contact": c,
                                    "axis": d.axis,
                                    "bucket": d.bucket,
                                    "descriptor": d.text,
                                    "prompt": "".join(p + m for p, m in zip(comp.parts, mentions)),
                                    "options": list(scale.options),
                                    "unbiased_answer": unbiased,
                                    "biased_answer": biased,
                                }
                            )
        out.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), out / "prompts.parquet", compression="zstd")
        n = len(rows)
    seconds = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"variant": variant, "prompts": n, "seconds": seconds, "peak_mb": peak_mb}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:  # child process
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(_run_variant(args.variant, args.data_dir, Path(tmp) / "out")))
        return
    results = {}
    for variant in ("naive", "scd"):
        runs = []
        for _ in range(args.repeat):
            proc = subprocess.run(
                [sys.executable, __file__, "--variant", variant, "--data-dir", str(args.data_dir)],
                check=True,
                capture_output=True,
                text=True,
            )
            runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        best = min(runs, key=lambda r: r["seconds"])
        results[variant] = best
        print(
            f"{variant:>6}: {best['prompts']:,} prompts in {best['seconds']:.2f} s "
            f"(best of {args.repeat}), peak {best['peak_mb']:.0f} MB"
        )
    ratio = results["naive"]["seconds"] / results["scd"]["seconds"]
    print(f"speed-up scd vs naive: {ratio:.1f}x  (target: <= 3 s and <= 1 GB; aim <= 1 s)")


if __name__ == "__main__":
    main()
