"""Report figures: valid, deterministic PNGs; clear errors for malformed frames."""

from __future__ import annotations

import io
import re

import matplotlib.image
import numpy as np
import pandas as pd
import pytest

from scd.eval.benchmarks.bbq.figures import bbq_bars_png
from scd.eval.benchmarks.figures import figure1_png, figure2_png

AXES = ["ability", "age", "nationality", "political_ideologies", "religion"]
SCENARIOS = ["education", "workplace", "sports", "community", "healthcare"]


def fig1_frame(n_settings: int) -> pd.DataFrame:
    rng = np.random.default_rng(n_settings)
    rows = [
        {"setting": f"Setting {s}", "contact": c, "before": rng.uniform(30, 46)}
        for s in range(1, n_settings + 1)
        for c in ("none", "positive", "negative", "all")
    ]
    frame = pd.DataFrame(rows)
    return frame.assign(after=frame["before"] / 4)


def heat_grid(seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    grid = pd.DataFrame(rng.uniform(0, 80, (len(AXES), 5)), index=AXES, columns=SCENARIOS)
    grid.iloc[1, 2] = np.nan
    return grid


def bbq_frame() -> pd.DataFrame:
    rng = np.random.default_rng(1)
    rows = [
        {
            "category": cat,
            "model": model,
            "accuracy_ambig": rng.uniform(0.2, 0.9),
            "accuracy_disambig": rng.uniform(0.4, 0.95),
            "bias_ambig": rng.uniform(-0.3, 0.5),
            "bias_disambig": rng.uniform(-0.2, 0.3),
        }
        for cat in ("Age", "Gender_identity", "Religion")
        for model in ("base", "tuned")
    ]
    frame = pd.DataFrame(rows)
    frame.loc[0, "bias_ambig"] = np.nan
    return frame


def decode(png: bytes) -> np.ndarray:
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    image = matplotlib.image.imread(io.BytesIO(png), format="png")
    assert image.ndim == 3 and image.shape[0] > 200 and image.shape[1] > 300
    assert image[..., :3].std() > 0.05  # something is drawn
    return image


@pytest.fixture(scope="module")
def pngs() -> dict[str, bytes]:
    return {
        "figure1": figure1_png(fig1_frame(3)),
        "figure2": figure2_png(heat_grid()),
        "bbq": bbq_bars_png(bbq_frame()),
    }


@pytest.mark.parametrize("name", ["figure1", "figure2", "bbq"])
def test_figures_are_valid_png(pngs: dict[str, bytes], name: str) -> None:
    decode(pngs[name])


def test_figures_are_deterministic(pngs: dict[str, bytes]) -> None:
    assert figure1_png(fig1_frame(3)) == pngs["figure1"]
    assert figure2_png(heat_grid()) == pngs["figure2"]
    assert bbq_bars_png(bbq_frame()) == pngs["bbq"]
    assert b"Software" not in pngs["figure1"] and b"matplotlib" not in pngs["figure1"]


@pytest.mark.parametrize("n_settings", [1, 8])
def test_figure1_setting_counts(n_settings: int) -> None:
    frame = fig1_frame(n_settings)
    frame.loc[0, "after"] = np.nan
    decode(figure1_png(frame))


def test_figure1_subset_of_contacts() -> None:
    frame = fig1_frame(2)
    decode(figure1_png(frame[frame["contact"] == "positive"]))


def test_figure2_side_by_side_with_nan() -> None:
    before = heat_grid()
    after = before / 3
    after.iloc[:, 0] = np.nan
    single = decode(figure2_png(before))
    pair = decode(figure2_png(before, after, titles=["Base", "Tuned"]))
    assert pair.shape[1] > single.shape[1] * 1.5


@pytest.mark.parametrize(
    ("func", "frame", "message"),
    [
        (figure1_png, fig1_frame(2).drop(columns="after"), "missing column(s) 'after'"),
        (figure1_png, fig1_frame(2).iloc[0:0], "empty"),
        (figure1_png, fig1_frame(2).assign(contact="some"), "unknown contact"),
        (figure1_png, pd.concat([fig1_frame(1), fig1_frame(1)]), "duplicated row"),
        (figure1_png, fig1_frame(1).assign(before="high"), "non-numeric"),
        (bbq_bars_png, bbq_frame().drop(columns=["bias_ambig"]), "missing column(s) 'bias_ambig'"),
        (bbq_bars_png, bbq_frame().iloc[0:0], "empty"),
        (figure2_png, pd.DataFrame(), "empty"),
    ],
)
def test_malformed_frames_raise(func, frame: pd.DataFrame, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as err:
        func(frame)
    assert "\n" not in str(err.value)


def test_figure2_title_count_checked() -> None:
    with pytest.raises(ValueError, match="title"):
        figure2_png(heat_grid(), heat_grid(1), titles=["only one"])


def test_a_heatmap_caption_says_grey_only_where_a_cell_is_grey() -> None:
    from scd.eval.benchmarks.captions import grey_note

    full = heat_grid().fillna(10.0)
    assert grey_note(heat_grid()) == "; grey: no prompts"  # one NaN cell
    assert grey_note(full) == grey_note(full, full / 2) == ""
    assert grey_note(full, full.drop(index="age"))  # a row only the first grid has
    assert grey_note(full.drop(columns="sports"), full)  # a column only the second has


def test_report_figures_are_numbered_in_their_order() -> None:
    from scd.eval.benchmarks.captions import FIGURE, number_figures

    text = f"*{FIGURE}. Loss.*\n\n## Bias\n\n*{FIGURE}. Bars.*\n*{FIGURE}. Heatmap.*\n"
    numbered = "*Figure 1. Loss.*\n\n## Bias\n\n*Figure 2. Bars.*\n*Figure 3. Heatmap.*\n"
    assert number_figures(text) == numbered
    assert number_figures("no figure") == "no figure"


def test_the_arena_figure_draws_an_arm_that_lost_its_judgment_apart() -> None:
    from scd.report.pareto import pareto_png

    frame = pd.DataFrame(
        {
            "label": ["base", "sft", "sft-contrast"],
            "cost": [0.0, 0.7, 0.5],
            "cost_low": [0.0, 0.6, 0.4],
            "cost_high": [0.0, 0.8, 0.6],
            "gain": [0.0, 11.5, 9.0],
            "gain_low": [0.0, 9.0, 6.0],
            "gain_high": [0.0, 14.0, 12.0],
            "kept": [True, False, True],
        }
    )
    lost = pareto_png(frame)
    assert lost[:4] == b"\x89PNG"
    assert lost != pareto_png(frame.assign(kept=True))
    assert pareto_png(frame.assign(kept=True)) == pareto_png(frame.drop(columns="kept"))
