"""A gap between two kinds of sentence (WinoBias's pro - anti) under an arm against the base
model's, paired per unit: each unit (a sentence pair) that both answered in full gives its gap
(right on the first kind minus right on the second: -1, 0 or 1) under the arm minus under the
base, and the exact sign-flip test over units (``clusters.sign_flip_test``) asks whether the
changes sum to more than chance -- under the null the arm's and the base's answers on a unit are
exchangeable, so each change is as likely negated."""

from __future__ import annotations

from typing import Any

__all__ = ["gap_change"]


def _gaps(records: list[dict[str, Any]], unit: str, kinds: tuple[str, str]) -> dict[Any, int]:
    by_unit: dict[Any, dict[str, bool]] = {}
    for r in records:
        if r["kind"] in kinds:
            by_unit.setdefault(r[unit], {})[r["kind"]] = bool(r["correct"])
    first, second = kinds
    return {k: int(v[first]) - int(v[second]) for k, v in by_unit.items() if len(v) == 2}


def gap_change(
    arm: list[dict[str, Any]], base: list[dict[str, Any]], unit: str, kinds: tuple[str, str]
) -> dict[str, Any]:
    """The change in the ``kinds[0]`` - ``kinds[1]`` accuracy gap from ``base`` to ``arm``
    (records with ``unit``, ``kind`` and ``correct``), paired per ``unit``: ``{pts, n, p,
    informative, min_p}`` -- the change in points, the units both answered in full, the
    two-sided exact sign-flip p (1.0 and ``pts`` None with no unit), the units whose gap changed
    and the smallest p the test can give with them."""
    from scd.eval.benchmarks.clusters import sign_flip_test

    after, before = _gaps(arm, unit, kinds), _gaps(base, unit, kinds)
    diffs = [after[k] - before[k] for k in after.keys() & before.keys()]
    if not diffs:
        return {"pts": None, "n": 0, "p": 1.0, "informative": 0, "min_p": 1.0}
    return {"pts": 100.0 * sum(diffs) / len(diffs), "n": len(diffs), **sign_flip_test(diffs)}
