"""The steer arm's vector, and the layer and scale it is applied at, chosen on validation prompts
as ``train.select: best`` chooses a training step: the lowest bias on the setting's validation
prompts (the training side's prompts that no training row uses) among the points of a grid of
layers and scales whose KL divergence from the base model on scd's neutral prompts stays within
a bound.

Resumable: each grid point's measures are appended to ``OUT/search/curve.jsonl`` as it finishes,
and a search run again measures only the points not there -- so a killed search resumes to the
same choice. Scale 0 (the base model itself) is always a point: a vector that helps nowhere is
not applied.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

from scd.errors import InputError
from scd.eval.steering import Steering, decoder_layers, layer_value, save_steering
from scd.io import atomic_file

__all__ = ["default_layers", "search_steering"]


def default_layers(n: int) -> list[int]:
    """Four layers evenly spread over the middle half of a model of ``n`` layers (all of a
    model of four or fewer)."""
    if n <= 4:
        return list(range(n))
    return sorted({round(n / 4 + i * (n / 2) / 3) for i in range(4)})


def _prompt_rows(prompts: list[Path]) -> dict[str, dict[str, Any]]:
    from scd.data_gen.contact import read_prompts

    rows = {}
    for path in prompts:
        cols = ["prompt_id", "options", "unbiased_answer", "biased_answer"]
        for r in read_prompts(path).select(cols).to_pylist():
            rows[r["prompt_id"]] = r
    return rows


def _side(sft: Path, part: str, prompts: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The contact rows of ``sft``'s ``part`` (train or eval) with their options and answers."""
    import pyarrow.parquet as pq

    out = []
    for r in pq.read_table(sft / f"{part}.parquet").to_pylist():
        if r["source"] != "scd":
            continue
        if r["prompt_id"] not in prompts:
            raise InputError(f"{sft}/{part}.parquet: prompt {r['prompt_id']} is in no prompt set")
        user = next(m["content"] for m in r["prompt"] if m["role"] == "user")
        out.append({**prompts[r["prompt_id"]], "user": user, "prompt": r["prompt"]})
    return out


Layers = int | tuple[int, ...]  # one layer, or several steered together


def _layers(value: Any) -> Layers:
    """A grid item or a curve point's ``layer`` (a number, or a list of them) as a key: one
    layer as its number, several as their sorted tuple."""
    if isinstance(value, int):
        return value
    layers = tuple(sorted({int(v) for v in value}))
    return layers[0] if len(layers) == 1 else layers


def _layer_order(value: Any) -> tuple[int, tuple[int, ...]]:
    """Fewer layers first, then the lower ones: the search's last tie-break."""
    layers = _layers(value)
    layers = (layers,) if isinstance(layers, int) else layers
    return len(layers), layers


def _done(curve: Path) -> dict[tuple[Layers, float], dict[str, Any]]:
    if not curve.is_file():
        return {}
    points = {}
    for line in curve.read_text().splitlines():
        try:
            p = json.loads(line)
        except ValueError:  # a line cut by a kill: measured again
            continue
        points[(_layers(p["layer"]), p["scale"])] = p
    return points


def _append(curve: Path, point: dict[str, Any]) -> None:
    curve.parent.mkdir(parents=True, exist_ok=True)
    with open(curve, "a", encoding="utf-8") as f:
        f.write(json.dumps(point) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _choose(points: list[dict[str, Any]], max_kl: float | None) -> tuple[dict[str, Any], str]:
    """The point kept, and why: the lowest validation bias within the KL bound, then the
    lowest KL, then the smallest scale in size (then the positive one, then fewer layers, then
    the lower ones)."""
    within = [p for p in points if max_kl is None or p["kl"] <= max_kl]
    best = min(
        within,
        key=lambda p: (
            p["bias_pct"],
            p["kl"],
            abs(p["scale"]),
            -p["scale"],
            _layer_order(p["layer"]),
        ),
    )
    bound = "no KL bound" if max_kl is None else f"KL within {max_kl}"
    return best, (
        f"the lowest validation bias ({best['bias_pct']:.2f}% of {best['n']} prompts) with "
        f"{bound} (its KL {best['kl']:.4f}) among {len(points)} layer x scale points"
    )


def _pairs_by_answer(
    fmt: Any, train: list[dict[str, Any]]
) -> dict[str, list[tuple[list[int], list[int]]]]:
    """The train rows' (unbiased, biased) answer sequences -- the evaluator's prompt ids and the
    option's -- grouped by the unbiased answer, in the rows' order."""
    groups: dict[str, list[tuple[list[int], list[int]]]] = {}
    for r in train:
        head = list(fmt.encode([r["user"]])[0])
        good, bad = fmt.option_ids((r["unbiased_answer"], r["biased_answer"]))
        groups.setdefault(r["unbiased_answer"], []).append((head + list(good), head + list(bad)))
    return groups


def _vectors(engine: Any, fmt: Any, train: list[dict[str, Any]], kept: Path) -> Any:
    """The per-layer vectors of the train rows' prompts (unbiased minus biased answer, each
    unbiased answer's prompts weighing the same), computed once and kept in ``kept`` for a
    resumed search."""
    import torch

    from scd.eval.steering import balanced_differences

    if kept.is_file():
        return torch.load(kept)
    groups = list(_pairs_by_answer(fmt, train).values())
    vectors = balanced_differences(engine.model, groups, engine.batch_size)
    kept.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(kept) as tmp:
        torch.save(vectors, tmp)
    return vectors


def _measure(
    engine: Any,
    fmt: Any,
    valid: list[dict[str, Any]],
    neutral: Any,
    steering: Steering | None,
    base_cache: dict[int, Any],
) -> dict[str, Any]:
    """One grid point: the validation prompts' bias and the KL from the base model on the
    neutral prompts, with ``steering`` added (None: the base model); the base model's side of
    the KL in ``base_cache``, computed at the first point measured and read at the others."""
    from scd.eval.capability.kl import kl_in_memory
    from scd.eval.engines import ChoiceRequest
    from scd.models.protocols import choose

    options = [fmt.option_ids(tuple(r["options"])) for r in valid]
    requests = [ChoiceRequest(tuple(fmt.encode([r["user"]])[0]), o) for r, o in zip(valid, options)]
    engine.use_steering(steering)
    scores = engine.score(requests)
    engine.use_steering(None)  # the KL's base pass unsteered; its arm pass adds ``steering``
    picks = [choose(r["options"], s, o, "sum") for r, s, o in zip(valid, scores, options)]
    biased = sum(p == r["biased_answer"] for p, r in zip(picks, valid))
    kl = kl_in_memory(engine.model, fmt.tokenizer, neutral, steer=steering, base_cache=base_cache)
    return {
        "bias_pct": 100.0 * biased / len(valid),
        "biased": biased,
        "n": len(valid),
        "kl": kl["kl"],
        "kl_ci_low": kl["kl_ci_low"],
        "kl_ci_high": kl["kl_ci_high"],
    }


def search_steering(
    model: str,
    sft: Path,
    prompts: list[Path],
    out: Path,
    *,
    fingerprint: str,
    layers: list[int | list[int]] | None,
    scales: list[float],
    max_kl: float | None,
    engine_options: Any,
    neutral_prompts: str | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Compute the vectors from ``sft``'s train rows, measure every (layer, scale) of the grid
    on its eval rows' prompts and scd's neutral prompts, and write the steering directory
    ``out`` with the point kept; return its ``steer.json``. An item of ``layers`` is one layer
    or a list of layers steered together (each by its own vector)."""
    from scd.eval.capability.neutral import load_neutral_prompts
    from scd.eval.engines.hf import HFEngine
    from scd.models.formatting import Formatter, load_tokenizer

    work = out.parent / f"{out.name}.search"
    rows = _prompt_rows(prompts)
    train, valid = _side(sft, "train", rows), _side(sft, "eval", rows)
    tokenizer = load_tokenizer(model)
    fmt = Formatter.of_rows(tokenizer, train)
    engine = HFEngine(model, engine_options, tokenizer=tokenizer)
    try:
        n = len(decoder_layers(engine.model))  # before minutes of activations, not after
        grid = layers if layers is not None else default_layers(n)
        grid_layers = list(dict.fromkeys(_layers(item) for item in grid))
        named = [la for item in grid_layers for la in ((item,) if isinstance(item, int) else item)]
        if bad := [layer for layer in named if not 0 <= layer < n]:
            raise InputError(
                f"layer {bad[0]}: the model has {n} (0 to {n - 1})", key="steer_layers"
            )
        vectors = _vectors(engine, fmt, train, work / "vectors.pt")
        _, neutral = load_neutral_prompts(neutral_prompts)
        curve = work / "curve.jsonl"
        done, base_cache = _done(curve), {}
        points = [(0, 0.0)] + [(la, float(s)) for la in grid_layers for s in scales if s != 0]
        for layer, scale in points:
            if (layer, scale) not in done:
                steering = Steering(out, vectors, layer, scale, fingerprint, {})
                point = _measure(
                    engine, fmt, valid, neutral, steering if scale else None, base_cache
                )
                done[(layer, scale)] = {"layer": layer_value(layer), "scale": scale, **point}
                _append(curve, done[(layer, scale)])
    finally:
        engine.use_steering(None)
        engine.close()
    measured = [done[p] for p in points]
    best, why = _choose(measured, max_kl)
    save_steering(
        out,
        vectors,
        best["layer"],
        best["scale"],
        fingerprint,
        why=why,
        max_kl=max_kl,
        validation=best,
        rows={
            "train": len(train),
            "validation": len(valid),
            "sft": str(sft),
            "train_by_unbiased_answer": dict(Counter(r["unbiased_answer"] for r in train)),
        },
        curve=measured,
    )
    return json.loads((out / "steer.json").read_text())
