"""Whether a steering vector has a direction to steer by, told by its own training pairs and
its validation curve (Braun et al. 2025, "Understanding (un)reliability of steering vectors in
language models"; Tan et al. 2024, "Analyzing the generalization and reliability of steering
vectors").

At each layer of the grid (:func:`vector_diagnostics`, from the training pairs):

- ``consistency``: the mean cosine of each pair's difference (unbiased minus biased answer, at
  the answer's last token) with the layer's vector -- near 1, the pairs agree on one direction;
  near 0, the mean is a small remainder of differences that point every way;
- ``separation``: how far the unbiased and the biased answers' activations lie apart along the
  vector -- the difference of their mean projections on its unit direction over the pooled
  standard deviation of the projections (a standardized mean difference).

And from the validation curve (:func:`anti_steerable`): the share of validation prompts whose
margin (log-probability of the unbiased option minus the biased one's) moves against the push
-- falls when the vector is added, rises when it is subtracted -- at a grid point, against the
unsteered model's margins.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["anti_steerable", "vector_diagnostics"]


def vector_diagnostics(
    model: Any,
    pairs: Sequence[tuple[list[int], list[int]]],
    vectors: Any,
    layers: Sequence[int],
    batch_size: int = 16,
) -> dict[str, dict[str, float]]:
    """``{layer: {"consistency", "separation"}}`` (the module docstring) of ``vectors``
    (``[layers, hidden]``) at each of ``layers``, over ``pairs`` (unbiased, biased answer
    sequences, as :func:`scd.eval.steering.answer_states` reads them)."""
    import torch

    from scd.eval.steering import answer_states

    cos: dict[int, list[Any]] = {la: [] for la in layers}
    good: dict[int, list[Any]] = {la: [] for la in layers}
    bad: dict[int, list[Any]] = {la: [] for la in layers}
    for states in answer_states(model, pairs, batch_size):
        for la in layers:
            v = vectors[la].to(states.device)
            unit = v / v.norm().clamp(min=1e-12)
            plus, minus = states[0::2, la], states[1::2, la]
            cos[la].append(torch.nn.functional.cosine_similarity(plus - minus, v[None], dim=1))
            good[la].append(plus @ unit)
            bad[la].append(minus @ unit)
    out = {}
    for la in layers:
        p, m = torch.cat(good[la]).double(), torch.cat(bad[la]).double()
        spread = ((p.var() + m.var()) / 2).sqrt() if len(p) > 1 else torch.tensor(0.0)
        separation = float((p.mean() - m.mean()) / spread) if spread > 0 else None
        out[str(la)] = {
            "consistency": round(float(torch.cat(cos[la]).mean()), 6),
            "separation": None if separation is None else round(separation, 6),
        }
    return out


def anti_steerable(base: Sequence[float], steered: Sequence[float], scale: float) -> float:
    """The share (%) of prompts whose margin moved against a push of ``scale`` (a positive one
    adds the vector: the margin should rise), from the unsteered ``base`` margins to the
    ``steered`` ones."""
    sign = 1.0 if scale > 0 else -1.0
    against = sum(sign * (s - b) < 0 for b, s in zip(base, steered))
    return round(100.0 * against / len(base), 4) if base else 0.0
