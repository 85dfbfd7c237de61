"""Validate ``scd eval bbq --format lm-eval`` on a real model: lm-evaluation-harness 0.4.13's own
``bbq_multiple_choice`` task (its YAML and utils.py, pointed at the same items) run by lm-eval
itself, and scd on the same items and model, side by side -- per item the twelve log-likelihoods
and the pick, and lm-eval's five metrics.

    python benchmarks/validate_bbq_lm_eval.py --model PATH_OR_GGUF [--limit 600] \\
        [--bbq ../shared/data/bbq/data] [--out outputs/validation/bbq-lm-eval]

Writes ``OUT/agreement.json`` (the figures VALIDATION.md reports) beside scd's run and lm-eval's
samples; both tools read the prompt as plain text (lm-eval without ``--apply_chat_template``,
scd with ``--no-chat-template``), float32 on the CPU.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--limit", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bbq", default=str(REPO.parent / "shared" / "data" / "bbq" / "data"))
    parser.add_argument("--out", default="outputs/validation/bbq-lm-eval")
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()

    import lm_eval
    import torch
    from lm_eval.tasks import TaskManager

    from scd.eval.benchmarks import get
    from scd.eval.benchmarks.bbq.data import FIELDS, load_bbq, stratified_subset
    from scd.eval.engines import engine_spec
    from scd.export.lm_eval_subset import lm_eval_task_on
    from scd.io import write_json
    from scd.models import resolve_model

    out = Path(args.out)
    model = resolve_model(args.model)
    items = stratified_subset(load_bbq(args.bbq), args.limit, args.seed)
    get("bbq").evaluate(
        model,
        out / "scd",
        data=args.bbq,
        limit=args.limit,
        seed=args.seed,
        format="lm-eval",
        chat_template=False,
        engine=engine_spec("hf", dtype="float32", batch_size=args.batch_size, device="cpu"),
    )
    # scd's own scoring time, summed over its timing log (a resumed run scores only what is left)
    timing = (out / "scd" / "timing.jsonl").read_text().splitlines()
    scd_seconds = sum(json.loads(line)["seconds"] for line in timing) if timing else 0.0
    ours = json.loads((out / "scd" / "summary.json").read_text())["lm_eval"]
    records = [json.loads(x) for x in (out / "scd" / "records.jsonl").open()]

    task_dir = out / "lm_eval_task"
    if not task_dir.exists():
        lm_eval_task_on(
            task_dir,
            "bbq/bbq_multiple_choice.yaml",
            "bbq_check",
            [{k: it[k] for k in FIELDS} for it in items],
        )
    start = time.perf_counter()
    res = lm_eval.simple_evaluate(
        model="hf",
        model_args=f"pretrained={model},dtype=float32",
        tasks=["bbq_check"],
        device="cpu",
        batch_size=args.batch_size,
        task_manager=TaskManager(include_path=str(task_dir)),
        log_samples=True,
    )
    lm_eval_seconds = time.perf_counter() - start
    theirs = res["results"]["bbq_check"]
    samples = sorted(res["samples"]["bbq_check"], key=lambda s: s["doc_id"])

    assert [r["id"] for r in records] == [it["id"] for it in items]
    picks_same = diff = 0
    for sample, rec in zip(samples, records, strict=True):
        lls = [x[0] for x in sample["filtered_resps"]]
        diff = max(diff, *(abs(a - b) for a, b in zip(lls, rec["lm_eval"]["logprobs"])))
        picks_same += rec["lm_eval"]["pick"] == max(range(len(lls)), key=lambda i: lls[i])
    result = {
        "model": args.model,
        "items": len(records),
        "seed": args.seed,
        "picks_equal": picks_same,
        "max_abs_logprob_difference": diff,
        "metrics": {k: {"scd": v, "lm_eval": theirs.get(f"{k},none")} for k, v in ours.items()},
        "seconds": {"scd": round(scd_seconds, 1), "lm_eval": round(lm_eval_seconds, 1)},
        "machine": f"{platform.machine()}, {torch.get_num_threads()} threads",
        "versions": {
            "lm_eval": lm_eval.__version__ if hasattr(lm_eval, "__version__") else "?",
            "torch": torch.__version__,
        },
    }
    write_json(out / "agreement.json", result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
