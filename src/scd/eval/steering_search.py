"""The steer arm's vector, and the layer and scale it is applied at, chosen on validation prompts:
the highest mean margin of the unbiased over the biased answer on the setting's validation
prompts (the training side's prompts that no training row uses: :mod:`scd.eval.search_points`)
among the points of a grid of layers and scales whose KL divergence from the base model on
scd's neutral prompts stays within a bound. The margin is continuous: a point that fixes some
prompts and breaks as many is not a tie with the base model, and one that moves every prompt a
little towards the unbiased answer shows it.

Resumable: each grid point's measures (its per-prompt margins too) are appended to
``OUT.search/curve.jsonl`` as it finishes, and a search run again measures only the points not
there (of the same validation prompts and positions) -- so a killed search resumes to the same
choice. Scale 0 (the base model itself) is always a point: a vector that helps nowhere is not
applied. ``steer.json`` also holds the vectors' diagnostics (:mod:`scd.eval.steering_diagnostics`).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from scd.errors import InputError
from scd.eval.search_points import (
    measure_points,
    train_rows,
    validation_key,
    validation_rows,
)
from scd.eval.steering import Steering, decoder_layers, layer_value, save_steering
from scd.io import atomic_file, read_json, write_json

__all__ = ["default_layers", "search_steering"]


def default_layers(n: int) -> list[int]:
    """Four layers evenly spread over the middle half of a model of ``n`` layers (all of a
    model of four or fewer)."""
    if n <= 4:
        return list(range(n))
    return sorted({round(n / 4 + i * (n / 2) / 3) for i in range(4)})


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


def _choose(points: list[dict[str, Any]], max_kl: float | None) -> tuple[dict[str, Any], str]:
    """The point kept, and why: the highest mean validation margin within the KL bound, then
    the lowest KL, then the smallest scale in size (then the positive one, then fewer layers,
    then the lower ones)."""
    within = [p for p in points if max_kl is None or p["kl"] <= max_kl]
    best = min(
        within,
        key=lambda p: (
            -p["margin"],
            p["kl"],
            abs(p["scale"]),
            -p["scale"],
            _layer_order(p["layer"]),
        ),
    )
    bound = "no KL bound" if max_kl is None else f"KL within {max_kl}"
    return best, (
        f"the highest mean validation margin ({best['margin']:.4f} nats over {best['n']} "
        f"prompts; bias {best['bias_pct']:.2f}%) with {bound} (its KL {best['kl']:.4f}) among "
        f"{len(points)} layer x scale points"
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


def _vectors(engine: Any, groups: list[Any], kept: Path) -> Any:
    """The per-layer vectors of the train rows' pairs (unbiased minus biased answer, each
    unbiased answer's prompts weighing the same), computed once and kept in ``kept`` for a
    resumed search."""
    import torch

    from scd.eval.steering import balanced_differences

    if kept.is_file():
        return torch.load(kept)
    vectors = balanced_differences(engine.model, groups, engine.batch_size)
    kept.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(kept) as tmp:
        torch.save(vectors, tmp)
    return vectors


def _diagnostics(engine: Any, groups: list[Any], vectors: Any, layers: list[int], kept: Path):
    """The vectors' consistency and separation at ``layers``, kept in ``kept`` once computed."""
    from scd.eval.steering_diagnostics import vector_diagnostics

    if kept.is_file() and set(read_json(kept)) >= {str(la) for la in layers}:
        return read_json(kept)
    pairs = [p for g in groups for p in g]
    found = vector_diagnostics(engine.model, pairs, vectors, layers, engine.batch_size)
    write_json(kept, found)
    return found


def _anti_steerable(measured: list[dict[str, Any]], diagnostics: dict[str, Any]) -> None:
    """Each steered point's ``against_pct``, and each single layer's ``anti_steerable_pct``
    at its smallest positive scale, from the points' margins
    (:mod:`scd.eval.steering_diagnostics`)."""
    from scd.eval.steering_diagnostics import anti_steerable

    base = next(p for p in measured if p["scale"] == 0)["margins"]
    for p in measured:
        if p["scale"] != 0:
            p["against_pct"] = anti_steerable(base, p["margins"], p["scale"])
    for layer, found in diagnostics.items():
        pushes = [p for p in measured if p["layer"] == int(layer) and p["scale"] > 0]
        first = min(pushes, key=lambda p: p["scale"], default=None)
        found["anti_steerable_pct"] = None if first is None else first["against_pct"]
        found["anti_steerable_scale"] = None if first is None else first["scale"]


def _grid(layers: list[Any] | None, n: int) -> tuple[list[Layers], list[int]]:
    """The grid's items (default: :func:`default_layers`) and the single layers they name.

    Raises:
        InputError: a layer the model (of ``n`` layers) does not have.
    """
    grid = list(dict.fromkeys(_layers(item) for item in (layers or default_layers(n))))
    named = sorted({la for item in grid for la in ((item,) if isinstance(item, int) else item)})
    if bad := [layer for layer in named if not 0 <= layer < n]:
        raise InputError(f"layer {bad[0]}: the model has {n} (0 to {n - 1})", key="steer_layers")
    return grid, named


def _arm(
    out: Path, vectors: Any, point: tuple[Layers, float], fingerprint: Any, positions: str
) -> Steering | None:
    """The steering of a grid point (layer(s), scale); None at scale 0, the base model."""
    layer, scale = point
    return Steering(out, vectors, layer, scale, fingerprint, {}, positions) if scale else None


def _where(point: tuple[Layers, float]) -> dict[str, Any]:
    """How the curve names a grid point: its layer(s) and scale."""
    return {"layer": layer_value(point[0]), "scale": point[1]}


def _record(
    measured: list[dict[str, Any]],
    diagnostics: dict[str, Any],
    max_kl: float | None,
    train: list[dict[str, Any]],
    valid: list[dict[str, Any]],
    sft: Path,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The point kept (:func:`_choose`; the points' and the diagnostics' anti-steerable shares
    added first: :func:`_anti_steerable`) and what ``steer.json`` records of the search."""
    _anti_steerable(measured, diagnostics)
    best, why = _choose(measured, max_kl)
    return best, dict(
        why=why,
        max_kl=max_kl,
        validation=best,
        diagnostics=diagnostics,
        validation_prompts=[r["prompt_id"] for r in valid],
        rows={"train": len(train), "validation": len(valid), "sft": str(sft)}
        | {"train_by_unbiased_answer": dict(Counter(r["unbiased_answer"] for r in train))},
        curve=measured,
    )


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
    positions: str = "answer",
    validation: tuple[int, int] = (60, 42),
    neutral_prompts: str | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Compute the vectors from ``sft``'s train rows, measure every (layer, scale) of the grid,
    added at ``positions`` (answer: from the assistant's turn on; all), on about
    ``validation[0]`` of its validation prompts (drawn with seed ``validation[1]``) and scd's
    neutral prompts, and write the steering directory ``out`` with the point kept; return its
    ``steer.json``. An item of ``layers`` is one layer or a list of layers steered together
    (each by its own vector)."""
    from scd.eval.engines.hf import HFEngine
    from scd.models.formatting import Formatter, load_tokenizer

    work = out.parent / f"{out.name}.search"
    train = train_rows(sft, prompts)
    valid = validation_rows(sft, *validation)
    tokenizer = load_tokenizer(model)
    fmt = Formatter.of_rows(tokenizer, [{"prompt": r["messages"]} for r in train])
    engine = HFEngine(model, engine_options, tokenizer=tokenizer)
    try:
        # the grid checked before minutes of activations, not after
        grid_layers, singles = _grid(layers, len(decoder_layers(engine.model)))
        groups = list(_pairs_by_answer(fmt, train).values())
        vectors = _vectors(engine, groups, work / "vectors.pt")
        diagnostics = _diagnostics(engine, groups, vectors, singles, work / "diagnostics.json")
        curve, key = work / "curve.jsonl", validation_key(valid, positions=positions)
        points = [(0, 0.0)] + [(la, float(s)) for la in grid_layers for s in scales if s != 0]
        measured = measure_points(
            engine,
            fmt,
            valid,
            neutral_prompts,
            engine.use_steering,
            [(p, _arm(out, vectors, p, fingerprint, positions), _where(p)) for p in points],
            curve,
            key,
            lambda p: (_layers(p["layer"]), p["scale"]),
        )
    finally:
        engine.use_steering(None)
        engine.close()
    best, record = _record(measured, diagnostics, max_kl, train, valid, sft)
    save_steering(out, vectors, best["layer"], best["scale"], fingerprint, positions, **record)
    return json.loads((out / "steer.json").read_text())
