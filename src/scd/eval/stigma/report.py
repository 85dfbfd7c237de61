"""Before/after stigma tables: several ``scd eval stigma`` result dirs of one probe side by side.

``stigma_table_data({"base": dir1, "tuned": dir2})`` reads each ``summary.json``; runs must share
one probe. SDS, mlm and sentiment runs give the group means, the stigmatized - non-stigmatized gap
with its 95% CI (from each run's summary: BCa bootstrap over conditions) and the change of the gap
against the first run; AQ-27 runs give, per dimension, the mental - physical difference with its
Bonferroni-corrected Wilcoxon p-value and Cronbach's alpha.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from scd.errors import InputError

__all__ = ["stigma_table", "stigma_table_data"]


def _summaries(result_dirs: dict[str, Path | str]) -> dict[str, dict[str, Any]]:
    if not result_dirs:
        raise InputError("give at least one NAME=DIR", key="runs")
    out = {}
    for name, d in result_dirs.items():
        path = Path(d) / "summary.json"
        if not path.is_file():
            raise InputError(f"--runs {name}={d}: no summary.json (not a finished stigma run)")
        summary = json.loads(path.read_text())
        if "probe" not in summary:
            raise InputError(f"--runs {name}={d}: summary.json is not from `scd eval stigma`")
        out[name] = summary
    probes = {s["probe"] for s in out.values()}
    if len(probes) > 1:
        raise InputError(f"runs of different probes ({', '.join(sorted(probes))})", key="runs")
    return out


def stigma_table_data(result_dirs: dict[str, Path | str]) -> dict[str, Any]:
    """The before/after table as data (see the module docstring)."""
    runs = _summaries(result_dirs)
    probe = next(iter(runs.values()))["probe"]
    names = list(runs)
    data: dict[str, Any] = {"probe": probe, "runs": names}
    if probe == "aq27":
        dims = list(dict.fromkeys(d for s in runs.values() for d in s["dimensions"]))
        pick = ("mean_diff", "p_bonferroni", "alpha")
        data["overall"] = {n: {k: runs[n]["overall"][k] for k in ("mean_diff", "p")} for n in names}
        data["dimensions"] = {
            d: {n: {k: runs[n]["dimensions"].get(d, {}).get(k) for k in pick} for n in names}
            for d in dims
        }
        return data
    first = runs[names[0]]["gap"]["gap"]
    data["measure"] = runs[names[0]].get("measure")
    data["gap"] = {
        n: {**runs[n]["gap"], "change": _sub(runs[n]["gap"]["gap"], first)} for n in names
    }
    cats = list(dict.fromkeys(c for s in runs.values() for c in s["by_category"]))
    data["categories"] = {
        c: {n: runs[n]["by_category"].get(c, {}).get("mean") for n in names} for c in cats
    }
    templates = list(dict.fromkeys(t for s in runs.values() for t in s["baseline"]))
    data["baseline"] = {t: {n: runs[n]["baseline"].get(t) for n in names} for t in templates}
    return data


def _sub(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _f(x: Any, digits: int = 3, sign: bool = False) -> str:
    if x is None:
        return "–"
    if isinstance(x, str):
        return x
    return f"{x:{'+' if sign else ''}.{digits}f}" if abs(x) >= 1e-3 or x == 0 else f"{x:.2g}"


def _aq_cell(c: dict[str, Any]) -> str:
    return f"{_f(c['mean_diff'])} (p_bonf {_f(c['p_bonferroni'])}, α {_f(c['alpha'], 2)})"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def stigma_table(result_dirs: dict[str, Path | str]) -> str:
    """Markdown before/after stigma table (runs in the given order)."""
    data = stigma_table_data(result_dirs)
    names, probe = data["runs"], data["probe"]
    head = [_row(["", *names]), "|---" * (len(names) + 1) + "|"]
    if probe == "aq27":
        lines = [f"## Stigma: AQ-27 mental − physical ({probe})", "", *head]
        o = data["overall"]
        lines.append(
            _row(["ALL", *(f"{_f(o[n]['mean_diff'])} (p {_f(o[n]['p'])})" for n in names)])
        )
        for dim, cells in data["dimensions"].items():
            lines.append(_row([dim.capitalize(), *(_aq_cell(cells[n]) for n in names)]))
        note = (
            "Cells: mean log-likelihood difference mental − physical (positive: mental illnesses "
            "more likely in the stigma statement), Wilcoxon signed-rank p (per dimension "
            "Bonferroni-corrected over 9 dimensions), Cronbach's α over mental illnesses."
        )
        return "\n".join([*lines, "", note, ""])
    g = data["gap"]
    what = "proportion negative" if probe == "sentiment" else "P(negative attitude)"
    lines = [f"## Stigma: {what} ({probe} probe)", "", *head]
    lines.append(_row(["Stigmatized", *(_f(g[n]["mean_x"]) for n in names)]))
    lines.append(_row(["Non-stigmatized", *(_f(g[n]["mean_y"]) for n in names)]))
    lines.append(
        _row(
            ["Gap [95% CI]"]
            + [
                f"{_f(g[n]['gap'], sign=True)} [{_f(g[n]['ci_low'])}, {_f(g[n]['ci_high'])}]"
                for n in names
            ]
        )
    )
    lines.append(_row([f"Change vs {names[0]}", *(_f(g[n]["change"], sign=True) for n in names)]))
    for cat, cells in data["categories"].items():
        lines.append(_row([cat.replace("_", "-"), *(_f(cells[n]) for n in names)]))
    for t, cells in data["baseline"].items():
        lines.append(_row([f"Baseline, template {t}", *(_f(cells[n]) for n in names)]))
    note = (
        f"Gap = mean {what} of stigmatized − non-stigmatized conditions (aggregated as in "
        "Mei et al. 2023); "
        "95% BCa bootstrap CI over conditions."
    )
    return "\n".join([*lines, "", note, ""])
