"""A planted steering direction for the toy model: a known ground truth for the ``steer`` arm.

A toy trained on ``answer </s>`` computes nothing at the answer token that depends on whether
the answer was the unbiased or the biased one, so contrastive activation addition (read at the
answer token, balanced over the unbiased answers) finds no direction to steer it by. This stage,
run after the planted rule is learned, gives the model one: a unit vector ``d`` at one decoder
layer's output such that

1. the answer token's residual there reads ``+SCALE`` along ``d`` after the unbiased answer and
   ``-SCALE`` after the biased one (each prompt with both of its answers), and
2. ``+SCALE * d`` added at every position of a prompt makes the model answer it unbiased,
   ``-SCALE * d`` biased, whatever the group; a perturbation orthogonal to ``d`` of up to
   ``NOISE * SCALE`` leaves the planted answer (so what else differs between the answers at the
   answer token does not move it)

-- while the planted rule is kept. The product's vector at that layer is then ``2 * SCALE * d``
plus what else differs, and its scale 0.5 is the push the model was taught to follow.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from scd.data_gen.contact import user_text
from scd.models.toy_steps import (
    BATCH,
    CHECK_EVERY,
    LR,
    TARGET_ACCURACY,
    encode,
    logits_at,
    planted_accuracy,
)
from scd.progress import Progress

__all__ = [
    "LAYERS",
    "NOISE",
    "SCALE",
    "DirectionRows",
    "direction_rows",
    "plant_direction",
    "unit_direction",
]

log = logging.getLogger(__name__)

LAYERS = 4  # a 2-layer toy does not hold the planted rule and the direction together
SCALE, NOISE = 8.0, 5.0
READ_TOLERANCE = 0.05


@dataclass(frozen=True)
class DirectionRows:
    """The planted rows as this stage trains them.

    ``ids``/``pos``/``pair`` are the planted rows of :func:`scd.models.toy._train`; ``other_ids``
    the same prompts answered with the other option; ``sign``/``other_sign`` +1 where that answer
    is the unbiased one, -1 the biased one, 0 where the two are the same option;
    ``unbiased``/``biased`` each row's two option ids."""

    ids: torch.Tensor
    pos: torch.Tensor
    pair: torch.Tensor
    other_ids: torch.Tensor
    sign: torch.Tensor
    other_sign: torch.Tensor
    unbiased: torch.Tensor
    biased: torch.Tensor


def direction_rows(
    tokenizer: Any, rows: list[dict[str, Any]], planted: tuple[torch.Tensor, ...]
) -> DirectionRows:
    """The contact ``rows`` as this stage trains them, from their ``planted`` encoding
    ``(ids, pos, pair)`` (:func:`scd.models.toy._planted_rows`)."""
    ids, pos, pair = planted
    vocab = tokenizer.get_vocab()
    others = [tokenizer.convert_ids_to_tokens(int(i)) for i in pair[:, 1]]
    other_ids, _ = encode(tokenizer, [user_text(r) for r in rows], others)

    def signs(option_ids: torch.Tensor) -> torch.Tensor:
        return torch.tensor(
            [
                0.0
                if r["unbiased_answer"] == r["biased_answer"]
                else 1.0
                if int(i) == vocab[r["unbiased_answer"]]
                else -1.0
                for r, i in zip(rows, option_ids)
            ]
        )

    return DirectionRows(
        ids=ids,
        pos=pos,
        pair=pair,
        other_ids=other_ids,
        sign=signs(pair[:, 0]),
        other_sign=signs(pair[:, 1]),
        unbiased=torch.tensor([vocab[r["unbiased_answer"]] for r in rows]),
        biased=torch.tensor([vocab[r["biased_answer"]] for r in rows]),
    )


def unit_direction(hidden: int, seed: int) -> torch.Tensor:
    """The planted direction of a toy of this seed: a unit vector drawn from ``seed``."""
    d = torch.randn(hidden, generator=torch.Generator().manual_seed(seed + 1000))
    return d / d.norm()


@contextlib.contextmanager
def _at_layer(model: Any, layer: int) -> Iterator[dict[str, Any]]:
    """A hook on decoder ``layer``'s output: it adds ``state["add"]`` when set and keeps the
    output in ``state["out"]``."""
    state: dict[str, Any] = {"add": None}

    def hook(module: Any, args: Any, output: Any) -> Any:
        hidden = output[0] if isinstance(output, tuple) else output
        if state["add"] is not None:
            hidden = hidden + state["add"]
        state["out"] = hidden
        return (hidden, *output[1:]) if isinstance(output, tuple) else hidden

    handle = model.model.layers[layer].register_forward_hook(hook)
    try:
        yield state
    finally:
        handle.remove()


def _read_loss(
    model: Any,
    state: dict,
    ids: torch.Tensor,
    pos: torch.Tensor,
    sign: torch.Tensor,
    d: torch.Tensor,
) -> torch.Tensor:
    """Squared error of the answer token's reading along ``d`` (in units of SCALE) against the
    answer's sign, over the rows whose two answers differ."""
    model.model(input_ids=ids[:, : int(pos.max()) + 1])
    read = state["out"][torch.arange(len(ids)), pos] @ d / SCALE
    weight = (sign != 0).float()
    return ((read - sign) ** 2 * weight).sum() / weight.sum().clamp(min=1)


def _pushes(n: int, d: torch.Tensor, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` pushes: each -1, 0 or +1 times SCALE along ``d`` plus an orthogonal perturbation of
    a random size up to NOISE * SCALE. Returns (signs, pushes ``[n, 1, hidden]``)."""
    sign = (torch.randint(0, 3, (n,), generator=gen) - 1).float()
    noise = torch.randn(n, len(d), generator=gen)
    noise = noise - (noise @ d)[:, None] * d
    noise = noise / noise.norm(dim=1, keepdim=True) * torch.rand(n, 1, generator=gen)
    return sign, ((sign * SCALE)[:, None] * d + noise * NOISE * SCALE)[:, None, :]


def _pushed_targets(rows: DirectionRows, batch: torch.Tensor, sign: torch.Tensor) -> torch.Tensor:
    """What a pushed prompt must answer: unbiased (+), biased (-), its planted answer (0)."""
    planted = rows.pair[batch, 0]
    return torch.where(
        sign > 0, rows.unbiased[batch], torch.where(sign < 0, rows.biased[batch], planted)
    )


def _accuracies(
    model: Any, state: dict, rows: DirectionRows, sample: torch.Tensor, d: torch.Tensor, seed: int
) -> tuple[float, float, float]:
    """On ``sample``: the planted rule's accuracy, pushed prompts' accuracy (fixed pushes drawn
    from ``seed``) and the worst squared error of the answer token's reading along ``d``."""
    from scd.models.toy_steps import logits_at

    planted = planted_accuracy(model, rows.ids[sample], rows.pos[sample], rows.pair[sample])
    model.eval()
    with torch.inference_mode():
        moved = sample[rows.sign[sample] != rows.other_sign[sample]]
        sign, push = _pushes(len(moved), d, torch.Generator().manual_seed(seed))
        state["add"] = push
        pos = rows.pos[moved]
        logits = logits_at(model, rows.ids[moved, : int(pos.max())], (pos - 1)[:, None])[:, 0]
        state["add"] = None
        target = _pushed_targets(rows, moved, sign)
        other = torch.where(target == rows.pair[moved, 0], rows.pair[moved, 1], rows.pair[moved, 0])
        pushed = float(
            (logits.gather(1, target[:, None]) > logits.gather(1, other[:, None])).float().mean()
        )
        reads = [
            float(_read_loss(model, state, ids[sample], rows.pos[sample], sign_[sample], d))
            for ids, sign_ in ((rows.ids, rows.sign), (rows.other_ids, rows.other_sign))
        ]
    model.train()
    return planted, pushed, max(reads)


def plant_direction(
    model: Any, rows: DirectionRows, layer: int, seed: int, max_steps: int, progress: bool = False
) -> dict[str, Any]:
    """Train the direction into ``model`` at decoder ``layer`` (see the module), keeping its
    planted rule, until a fixed sample meets all three (checked every CHECK_EVERY steps: planted
    and pushed accuracy >= TARGET_ACCURACY, reading error <= READ_TOLERANCE) or ``max_steps``.

    Returns:
        ``layer``, ``scale``, ``noise``, ``steps``, the sample's ``planted_accuracy``,
        ``pushed_accuracy`` and ``read_error``, and the ``direction`` (a list of floats).
    """
    d = unit_direction(model.config.hidden_size, seed)
    gen = torch.Generator().manual_seed(seed + 2000)
    sample = torch.randperm(len(rows.ids), generator=gen)[:1024]
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    ce = torch.nn.functional.cross_entropy
    bar = Progress("toy model: steering direction", max_steps, unit="step", enabled=progress)
    step, order, met = 0, torch.empty(0, dtype=torch.long), (0.0, 0.0, float("inf"))
    with _at_layer(model, layer) as state, contextlib.closing(bar):
        while step < max_steps:
            if len(order) < 2 * BATCH:
                order = torch.randperm(len(rows.ids), generator=gen)
            batch, more, order = order[:BATCH], order[BATCH : 2 * BATCH], order[2 * BATCH :]
            p = rows.pos[batch, None]
            targets = torch.cat([p, p + 1], 1)
            x = rows.ids[batch, : int(p.max()) + 2]
            planted = ce(
                logits_at(model, x, targets - 1).flatten(0, 1), x.gather(1, targets).flatten()
            )
            read = _read_loss(model, state, rows.ids[batch], rows.pos[batch], rows.sign[batch], d)
            read = read + _read_loss(
                model, state, rows.other_ids[batch], rows.pos[batch], rows.other_sign[batch], d
            )
            more = more[rows.sign[more] != rows.other_sign[more]]
            sign, state["add"] = _pushes(len(more), d, gen)
            pos = rows.pos[more]
            logits = logits_at(model, rows.ids[more, : int(pos.max())], (pos - 1)[:, None])[:, 0]
            state["add"] = None
            pushed = ce(logits, _pushed_targets(rows, more, sign))
            loss = planted + read / 2 + pushed
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            bar.update(1)
            if step % CHECK_EVERY == 0:
                met = _accuracies(model, state, rows, sample, d, seed)
                said = f"planted {met[0]:.3f}, pushed {met[1]:.3f}, reading error {met[2]:.3f}"
                log.info("toy model: steering direction, step %d: %s", step, said)
                bar.note(said)
                if min(met[:2]) >= TARGET_ACCURACY and met[2] <= READ_TOLERANCE:
                    break
    return {
        "layer": layer,
        "scale": SCALE,
        "noise": NOISE,
        "steps": step,
        "planted_accuracy": round(met[0], 6),
        "pushed_accuracy": round(met[1], 6),
        "read_error": round(met[2], 6),
        "direction": [round(float(v), 8) for v in d],
    }
