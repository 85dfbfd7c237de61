"""The arena's verdicts: which trained or prompted arms count as **debiased**.

An arm is debiased only when its gain column (bias) fell significantly (Holm p < :data:`ALPHA`)
and it passed every gate column (the judgment gate); each verdict says why, and each row gets
``debiased`` (True, False, or None: not established). This module names no benchmark.
"""

from __future__ import annotations

from typing import Any

from scd.eval.benchmarks.columns import Column

__all__ = ["ALPHA", "row_name", "verdicts"]

ALPHA = 0.05  # a fall in the gain column counts where its Holm-corrected p is below this


def row_name(row: dict[str, Any]) -> str:
    """A row named in a line: its arm, its seed (if any) and its setting."""
    seed = f" ({row['seed']})" if "seed" in row else ""
    return f"{row['arm']}{seed}" + (f", setting {row['setting']}" if row.get("setting") else "")


def _verdict(row: dict[str, Any], base: dict[str, Any], gain: Column, gates: list[Column]) -> str:
    """One arm's verdict, in a line (see the module docstring)."""
    p = row.get(f"{gain.test}_holm") if gain.test else None
    if row.get(gain.key) is None or base.get(gain.key) is None or p is None:
        return "no verdict yet (its held-out result has not finished)"
    lost = [c for c in gates if row.get(c.key) == 0]
    unknown = [c for c in gates if row.get(c.key) is None]
    fell = row[gain.key] < base[gain.key] and p < ALPHA
    change = f"{base[gain.key]:.1f} → {row[gain.key]:.1f}, Holm p {p:.2g}"
    if not fell:
        return f"**not debiased**: its bias did not fall significantly ({change})"
    if lost:
        why = "; ".join(row.get(f"{c.key}_why") or c.label for c in lost)
        return f"**not debiased**: its bias fell ({change}) but it lost its judgment -- {why}"
    if unknown:
        why = "; ".join(
            row.get(f"{c.key}_why") or f"no {c.label.lower()} (its benchmark did not run)"
            for c in unknown
        )
        return f"bias fell ({change}); not established as debiased: {why}"
    return f"**debiased**: its bias fell ({change}) and it kept its judgment"


def verdicts(rows: list[dict[str, Any]], declared: list[Column]) -> list[str]:
    """The arms' verdicts under the first table, one line per arm and seed; each row gets
    ``debiased`` (True, False, or None: not established)."""
    gain = next((c for c in declared if c.gain and c.test), None)
    gates = [c for c in declared if c.gate]
    if gain is None:
        return []
    lines = []
    for row in (r for r in rows if r["arm"] != "base"):
        base = next(b for b in rows if b["setting"] == row["setting"] and b["arm"] == "base")
        text = _verdict(row, base, gain, gates)
        row["debiased"] = (
            True if text.startswith("**debiased") else False if "not debiased" in text else None
        )
        lines.append(f"- {row_name(row)}: {text}.")
    if not lines:
        return []
    rule = " and kept its judgment (every gate column)" if gates else ""
    return [
        f"Verdicts: an arm is debiased when its held-out {gain.label.split(' [')[0].lower()} "
        f"fell significantly (Holm p < {ALPHA}){rule}.",
        "",
        *lines,
        "",
    ]
