"""The erase arm's eraser, and the layers it erases at, chosen on validation prompts: each item
of a grid of layers (one layer, or several erased together) gets its LEACE eraser fitted on the
setting's training prompts and their baselines (:mod:`scd.eval.erasure`), and is measured on
the setting's validation prompts (the training side's prompts that no training row uses:
:mod:`scd.eval.search_points`) and on scd's neutral prompts; the item kept has the lowest
validation bias among those whose KL divergence from the base model stays within a bound (ties:
the higher mean margin of the unbiased over the biased answer, then the lower KL, then fewer
layers, then the lower ones). No erasure (the base model itself) is always a point: an eraser
that helps nowhere is not applied.

Resumable as the steer arm's search: the erasers are fitted once (``OUT.search/erasers.pt``)
and each point appended to ``OUT.search/curve.jsonl`` as it finishes.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

from scd.errors import InputError
from scd.eval.erasure import BASELINE, UNKNOWN, Erasure, fit_erasers, save_erasure, token_labels
from scd.eval.search_points import (
    measure_points,
    train_rows,
    validation_key,
    validation_rows,
)
from scd.eval.steering import decoder_layers
from scd.eval.steering_search import default_layers
from scd.io import atomic_file

__all__ = ["default_erase_layers", "search_erasure"]

Group = tuple[int, ...]  # the layers of a grid item, erased together


def default_erase_layers(n: int) -> list[int]:
    """The token embeddings (the input of layer 0) and the steer arm's four layers over the
    middle half (:func:`~scd.eval.steering_search.default_layers`)."""
    return sorted({0, *default_layers(n)})


def _group(value: Any) -> Group:
    return (int(value),) if isinstance(value, int) else tuple(sorted({int(v) for v in value}))


def _choose(points: list[dict[str, Any]], max_kl: float | None) -> tuple[dict[str, Any], str]:
    """The point kept, and why (the module docstring)."""
    within = [p for p in points if max_kl is None or p["kl"] <= max_kl]
    best = min(
        within,
        key=lambda p: (p["bias_pct"], -p["margin"], p["kl"], len(p["layers"]), p["layers"]),
    )
    bound = "no KL bound" if max_kl is None else f"KL within {max_kl}"
    layers = best["layers"]
    where = f"layer{'s' * (len(layers) > 1)} {'+'.join(map(str, layers))}" if layers else "none"
    return best, (
        f"{where} kept: the lowest validation bias ({best['bias_pct']:.2f}% of {best['n']} "
        f"prompts; mean margin {best['margin']:.4f} nats) with {bound} (its KL "
        f"{best['kl']:.4f}) among {len(points)} points"
    )


def _baselines(sft: Path, prompts: list[Path]) -> list[dict[str, Any]]:
    """The descriptor-free baseline rows of the prompt sets, each with its user text in the
    SFT data's protocol."""
    from scd.data_gen.contact import read_baseline
    from scd.io import read_json
    from scd.models.protocols import get_protocol

    protocol = get_protocol(read_json(sft / "manifest.json").get("protocol", "scd"))
    rows = [r for p in prompts if (t := read_baseline(p)) is not None for r in t.to_pylist()]
    if not rows:
        raise InputError(
            f"{prompts[0]}: no baseline.parquet: the erase arm erases the group against the "
            "descriptor-free baselines (scd generate contact writes them)"
        )
    return [{**r, "user": protocol.user_text(r)} for r in rows]


def _fit(model: Any, data: list, grid: list[Group], k: int, batch: int, kept: Path) -> dict:
    """Each grid item's erasers (by layer), fitted once and kept in ``kept``: the first layer
    of every item from one pass on the base model, each further layer of an item with the
    erasers before it applied."""
    import torch

    if kept.is_file():
        return torch.load(kept)
    firsts = sorted({g[0] for g in grid})
    alone = fit_erasers(model, data, firsts, k, batch)
    fitted: dict[Group, dict[int, Any]] = {}
    for group in grid:
        erasers = {group[0]: alone[group[0]]}
        for layer in group[1:]:
            erasers[layer] = fit_erasers(model, data, [layer], k, batch, before=erasers)[layer]
        fitted[group] = {la: (e.proj_left, e.proj_right, e.bias) for la, e in erasers.items()}
    kept.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(kept) as tmp:
        torch.save(fitted, tmp)
    return fitted


def _concept_rows(train: list[dict], concept: str, shuffle: int | None) -> list[dict]:
    """The training rows, their ``concept`` values permuted among them when ``shuffle`` (a
    seed) is given: the control of an eraser of no group."""
    if shuffle is None:
        return train
    values = [r[concept] for r in train]
    random.Random(shuffle).shuffle(values)
    return [{**r, concept: v} for r, v in zip(train, values)]


def _grid(layers: list[int | list[int]] | None, n: int) -> list[Group]:
    """The grid's items (default: :func:`default_erase_layers`), each once.

    Raises:
        InputError: a layer the model (of ``n`` layers) does not have.
    """
    grid = list(dict.fromkeys(_group(g) for g in (layers or default_erase_layers(n))))
    if bad := [la for g in grid for la in g if not 0 <= la < n]:
        raise InputError(f"layer {bad[0]}: the model has {n} (0 to {n - 1})", key="erase_layers")
    return grid


def _point_layers(point: dict[str, Any]) -> Group:
    """A curve point's identity: the layers it erased at."""
    return tuple(point["layers"])


def _token_counts(data: list[tuple[list[int], list[int]]], classes: list[str]) -> dict[str, int]:
    """The tokens of ``data`` labelled with each class, and those before a descriptor's place
    (``prior``)."""
    counts = Counter(y for _, labels in data for y in labels)
    return {**{c: counts.get(i, 0) for i, c in enumerate(classes)}, "prior": counts[UNKNOWN]}


def search_erasure(
    model: str,
    sft: Path,
    prompts: list[Path],
    out: Path,
    *,
    fingerprint: str,
    layers: list[int | list[int]] | None,
    max_kl: float | None,
    engine_options: Any,
    concept: str = "axis",
    validation: tuple[int, int] = (60, 42),
    neutral_prompts: str | None = None,
    shuffle: int | None = None,
) -> dict[str, Any]:
    """Fit the erasers of every item of the grid ``layers`` (default:
    :func:`default_erase_layers`) on ``sft``'s train rows and their baselines, measure each on
    about ``validation[0]`` validation prompts (seed ``validation[1]``) and scd's neutral
    prompts, and write the eraser directory ``out`` of the item kept; return its
    ``erase.json``. ``shuffle``: fit on the rows' groups permuted by this seed (a control)."""
    from scd.eval.engines.hf import HFEngine
    from scd.models.formatting import Formatter, load_tokenizer

    work = out.parent / f"{out.name}.search"
    train = _concept_rows(train_rows(sft, prompts), concept, shuffle)
    baselines = _baselines(sft, prompts)
    valid = validation_rows(sft, *validation)
    tokenizer = load_tokenizer(model)
    fmt = Formatter.of_rows(tokenizer, [{"prompt": r["messages"]} for r in train])
    engine = HFEngine(model, engine_options, tokenizer=tokenizer)
    try:
        grid = _grid(layers, len(decoder_layers(engine.model)))  # before any activation, not after
        classes = [*sorted({str(r[concept]) for r in train}), BASELINE]
        data = token_labels(train, baselines, fmt.encode, concept, classes)
        k, batch = len(classes), engine.batch_size
        erasers = _fit(engine.model, data, grid, k, batch, work / "erasers.pt")
        key = validation_key(valid, concept=concept, shuffle=shuffle)
        points = [((), None, {"layers": []})] + [
            (g, Erasure(out, erasers[g], fingerprint, {}), {"layers": list(g)}) for g in grid
        ]
        curve = work / "curve.jsonl"
        use = engine.use_erasure
        measured = measure_points(
            engine, fmt, valid, neutral_prompts, use, points, curve, key, _point_layers
        )
    finally:
        engine.use_erasure(None)
        engine.close()
    best, why = _choose(measured, max_kl)
    save_erasure(
        out,
        erasers[tuple(best["layers"])] if best["layers"] else {},
        fingerprint,
        concept=concept,
        classes=classes,
        tokens=_token_counts(data, classes),
        shuffled=shuffle,
        why=why,
        max_kl=max_kl,
        validation=best,
        validation_prompts=[r["prompt_id"] for r in valid],
        rows={"train": len(train), "baselines": len(data) - len(train), "sft": str(sft)},
        curve=measured,
    )
    return json.loads((out / "erase.json").read_text())
