"""What the steer and erase arms' searches share: the setting's training rows they are made
from, the validation prompts they choose on, one grid point's measures, and the curve file
that makes a search resumable.

Validation: the training side's prompts that no training row uses (``SFT/validation/``,
written by :func:`scd.data_gen.sft.write_sft`): about ``n`` descriptor prompts, whole prompt
sets stratified as ``scd eval bias --limit`` draws them, seeded -- the prompts
``train.select: best`` chooses a training step on -- never a held-out prompt, and no
descriptor-free baseline (those of a scale the held-out side shares are its baselines too).
Each is put to the model in the SFT data's own text (its protocol's user turn, its system
prompt).

A grid point's measures: per validation prompt the margin -- the log-probability of the
unbiased option minus the biased one's (summed over the option's tokens, as the bias benchmark
scores them) -- their mean, the share of prompts whose chosen option is the biased one, and the
KL divergence from the unchanged model on scd's neutral prompts. The curve file
(``curve.jsonl``) gets each point as it is measured (fsync'd); a point of another validation set
(``key``) is measured again.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scd.errors import InputError

__all__ = [
    "append_point",
    "measure_point",
    "measure_points",
    "read_curve",
    "train_rows",
    "validation_key",
    "validation_rows",
]


def _prompt_rows(prompts: list[Path]) -> dict[str, dict[str, Any]]:
    from scd.data_gen.contact import read_prompts

    return {r["prompt_id"]: r for path in prompts for r in read_prompts(path).to_pylist()}


def train_rows(sft: Path, prompts: list[Path]) -> list[dict[str, Any]]:
    """The contact rows of ``sft``'s ``train.parquet`` (the prompts SCD's adapter trains on),
    each its prompt row (from ``prompts``) with ``user`` (its user message as trained) and
    ``prompt`` (the conversation)."""
    import pyarrow.parquet as pq

    rows, out = _prompt_rows(prompts), []
    for r in pq.read_table(sft / "train.parquet").to_pylist():
        if r["source"] != "scd":
            continue
        if r["prompt_id"] not in rows:
            raise InputError(f"{sft}/train.parquet: prompt {r['prompt_id']} is in no prompt set")
        user = next(m["content"] for m in r["prompt"] if m["role"] == "user")
        out.append({**rows[r["prompt_id"]], "user": user, "messages": r["prompt"]})
    return out


def validation_rows(sft: Path, n: int, seed: int) -> list[dict[str, Any]]:
    """About ``n`` validation descriptor prompts of ``sft`` (the module docstring), each with
    ``user``: its user message in the SFT data's text.

    Raises:
        InputError: SFT data without validation prompts (from an scd before them), or none
            left (every training-side prompt is a training row).
    """
    from scd.eval.benchmarks.bias.task import load_work
    from scd.io import read_json
    from scd.models.protocols import get_protocol

    directory = sft / "validation"
    if not (directory / "prompts.parquet").is_file():
        raise InputError(f"{sft} has no validation prompts (SFT data of an older scd: remove it)")
    protocol = get_protocol(read_json(sft / "manifest.json").get("protocol", "scd"))
    rows = [r for r in load_work(directory, n, seed) if not r["baseline"]]
    if not rows:
        raise InputError(
            f"{sft}: no validation prompts: every training-side prompt of the setting is a "
            "training row (lower data.max_train)"
        )
    return [{**r, "user": protocol.user_text(r)} for r in rows]


def validation_key(valid: list[dict[str, Any]], **settings: Any) -> str:
    """What a curve's points were measured on: the validation prompts and ``settings``."""
    text = json.dumps([[r["prompt_id"] for r in valid], settings], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def measure_point(
    engine: Any,
    fmt: Any,
    valid: list[dict[str, Any]],
    neutral: Any,
    use: Callable[[Any], None],
    arm: Any,
    base_cache: dict[int, Any],
) -> dict[str, Any]:
    """One grid point: ``use(arm)`` switches the engine to it (``use(None)``: back to the base
    model), then the validation prompts' margins and bias, and the KL from the base model on the
    neutral prompts (``arm`` applied by its ``applied(model, tokenizer)``; None: the base
    itself); the base's side of the KL in ``base_cache``, computed at the first point measured
    and read at the others."""
    from scd.eval.capability.kl import kl_in_memory
    from scd.eval.engines import ChoiceRequest
    from scd.models.protocols import choose

    options = [fmt.option_ids(tuple(r["options"])) for r in valid]
    requests = [ChoiceRequest(tuple(fmt.encode([r["user"]])[0]), o) for r, o in zip(valid, options)]
    use(arm)
    try:
        scores = engine.score(requests)
    finally:
        use(None)  # the KL's base pass unchanged; its arm pass applies ``arm``
    picks = [choose(r["options"], s, o, "sum") for r, s, o in zip(valid, scores, options)]
    margins = []
    for r, s in zip(valid, scores):
        at = {o: lp for o, lp in zip(r["options"], s)}
        margins.append(round(at[r["unbiased_answer"]] - at[r["biased_answer"]], 6))
    biased = sum(p == r["biased_answer"] for p, r in zip(picks, valid))
    kl = kl_in_memory(engine.model, fmt.tokenizer, neutral, arm=arm, base_cache=base_cache)
    return {
        "margin": round(sum(margins) / len(margins), 6),
        "bias_pct": 100.0 * biased / len(valid),
        "biased": biased,
        "n": len(valid),
        "kl": kl["kl"],
        "kl_ci_low": kl["kl_ci_low"],
        "kl_ci_high": kl["kl_ci_high"],
        "margins": margins,
    }


def measure_points(
    engine: Any,
    fmt: Any,
    valid: list[dict[str, Any]],
    neutral_prompts: str | None,
    use: Callable[[Any], None],
    points: list[tuple[Any, Any, dict[str, Any]]],
    curve: Path,
    key: str,
    point_key: Callable[[dict], Any],
) -> list[dict[str, Any]]:
    """Each of a search's ``points`` -- (its identity, the arm that acts there or None for the
    base model, the fields that say where it is) -- in that order, on ``valid`` and the neutral
    prompts: read from ``curve`` where measured on ``key`` already (``point_key`` gives a kept
    point's identity), else measured (:func:`measure_point`) and appended to it."""
    from scd.eval.capability.neutral import load_neutral_prompts

    _, neutral = load_neutral_prompts(neutral_prompts)
    done = read_curve(curve, key, point_key)
    base_cache: dict[int, Any] = {}
    for at, arm, where in points:
        if at not in done:
            point = measure_point(engine, fmt, valid, neutral, use, arm, base_cache)
            done[at] = {"key": key, **where, **point}
            append_point(curve, done[at])
    return [done[at] for at, _, _ in points]


def read_curve(curve: Path, key: str, point_key: Callable[[dict], Any]) -> dict[Any, dict]:
    """The points of ``curve`` measured on ``key``'s validation set, by ``point_key(point)``
    (a line cut by a kill, or of another set, is left out: measured again)."""
    if not curve.is_file():
        return {}
    points = {}
    for line in curve.read_text().splitlines():
        try:
            p = json.loads(line)
        except ValueError:
            continue
        if p.get("key") == key:
            points[point_key(p)] = p
    return points


def append_point(curve: Path, point: dict[str, Any]) -> None:
    """Append one measured point to ``curve`` (fsync'd)."""
    curve.parent.mkdir(parents=True, exist_ok=True)
    with open(curve, "a", encoding="utf-8") as f:
        f.write(json.dumps(point) + "\n")
        f.flush()
        os.fsync(f.fileno())
