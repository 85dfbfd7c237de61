"""Self-contained HTML report: tables, embedded figures, escaping, files; a real browser render."""

from __future__ import annotations

import base64
import io
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scd.eval.benchmarks.bbq.figures import bbq_bars_png
from scd.eval.benchmarks.figures import figure1_png, figure2_png
from scd.report.html import render_html, render_markdown, write_report

TABLE = """\
## Bias % before and after tuning

| Setting | No contact before | No contact after | Positive before | Positive after |
|---|---:|---:|---:|---:|
| Setting 1 | 39.95 | 3.34 | 35.70 | 3.33 |
| Setting 2 | 41.40 | 2.48 | 38.84 | 2.77 |
| Setting 3 | 38.75 | 5.25 | 32.27 | 12.40 |
"""


def tiny_png(color: tuple[float, float, float] = (0.1, 0.4, 0.8)) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(1, 1), facecolor=color)
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=20, metadata={"Software": None})
    return buf.getvalue()


class Collector(HTMLParser):
    """Collects start tags with their attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def parse(page: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = Collector()
    parser.feed(page)
    return parser.tags


def test_table_and_figures_embedded() -> None:
    figures = {"fig1": tiny_png(), "other": tiny_png((0.8, 0.2, 0.1))}
    page = render_html("Run report", TABLE + "\n{{figure:fig1}}\n\nAfter the figure.\n", figures)
    tags = parse(page)
    names = [tag for tag, _ in tags]
    assert "table" in names and names.count("tr") == 4
    assert {"td", "th"} <= set(names)
    assert any(tag == "td" and attrs.get("class") == "num" for tag, attrs in tags)
    assert not any(tag in {"script", "link", "iframe"} for tag in names)
    assert "http://" not in page and "https://" not in page
    for _, attrs in tags:
        for key in ("src", "href"):
            assert not (attrs.get(key) or "").startswith(("http:", "https:", "//"))
    images = [attrs for tag, attrs in tags if tag == "img"]
    prefix = "data:image/png;base64,"
    assert [img["alt"] for img in images] == ["fig1", "other"]  # placed one first, unused appended
    assert all(img["src"].startswith(prefix) for img in images)
    assert base64.b64decode(images[0]["src"][len(prefix) :]) == figures["fig1"]
    assert base64.b64decode(images[1]["src"][len(prefix) :]) == figures["other"]
    assert page.index("Bias % before") < page.index('alt="fig1"') < page.index("After the figure")
    assert (
        page.index("After the figure")
        < page.index('<h2 id="figures">Figures</h2>')
        < page.index('"other"')
    )


def test_title_escaped() -> None:
    page = render_html("<script>alert(1)</script> & co", "Some text <b>raw</b>.")
    names = [tag for tag, _ in parse(page)]
    assert "script" not in names and "b" not in names
    assert "<title>&lt;script&gt;alert(1)&lt;/script&gt; &amp; co</title>" in page
    assert names.count("h1") == 1
    own = parse(render_html("T", "# Own heading\n\ntext"))
    assert [tag for tag, _ in own].count("h1") == 1 and ("h1", {"id": "own-heading"}) in own


def test_missing_figure_placeholder_raises() -> None:
    with pytest.raises(ValueError, match="no figure named 'nope'"):
        render_html("T", "text\n\n{{figure:nope}}\n", {"fig1": tiny_png()})
    with pytest.raises(ValueError, match="not PNG"):
        render_html("T", "text", {"fig1": b"GIF89a"})
    with pytest.raises(ValueError, match="cannot be embedded"):
        render_html("T", "![x](https://example.org/x.png)")


def test_placeholder_in_code_block_is_left_alone() -> None:
    text = "```\n{{figure:nope}}\n```\n"
    assert "{{figure:nope}}" in render_html("T", text)
    assert "{{figure:nope}}" in render_markdown(text)


def test_write_report(tmp_path: Path) -> None:
    figures = {"figure1": tiny_png(), "bbq": tiny_png((0.9, 0.5, 0.1))}
    md_path, html_path = write_report(
        tmp_path / "out", "Run <1>", TABLE + "{{figure:bbq}}", figures
    )
    assert md_path == tmp_path / "out" / "report.md" and html_path.name == "report.html"
    text = md_path.read_text()
    assert text.startswith("# Run <1>\n") and "| Setting 1 |" in text
    assert "![bbq](figures/bbq.png)" in text and "![figure1](figures/figure1.png)" in text
    assert text.index("figures/bbq.png") < text.index("## Figures") < text.index("figure1.png")
    for name, data in figures.items():
        assert (tmp_path / "out" / "figures" / f"{name}.png").read_bytes() == data
    assert "data:image/png;base64," in html_path.read_text()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "figures",
        "report.html",
        "report.md",
    ]  # no temporary files left behind
    with pytest.raises(ValueError):
        write_report(tmp_path / "bad", "T", "{{figure:missing}}", figures)
    assert not (tmp_path / "bad").exists()  # validated before anything is written


def synthetic_figures() -> dict[str, bytes]:
    rng = np.random.default_rng(0)
    fig1 = pd.DataFrame(
        [
            {"setting": f"Setting {s}", "contact": c, "before": rng.uniform(30, 46)}
            for s in (1, 2, 3)
            for c in ("none", "positive", "negative", "all")
        ]
    )
    fig1["after"] = fig1["before"] * rng.uniform(0.05, 0.6, len(fig1))
    axes = [
        "ability",
        "age",
        "nationality",
        "political_ideologies",
        "religion",
        "sexual_orientation",
    ]
    scenarios = ["education", "workplace", "sports", "community", "healthcare"]
    grid = pd.DataFrame(rng.uniform(0, 80, (len(axes), 5)), index=axes, columns=scenarios)
    grid.iloc[2, 3] = np.nan
    bbq = pd.DataFrame(
        [
            {
                "category": cat,
                "model": model,
                "accuracy_ambig": rng.uniform(0.2, 0.9),
                "accuracy_disambig": rng.uniform(0.4, 0.95),
                "bias_ambig": rng.uniform(-0.3, 0.5),
                "bias_disambig": rng.uniform(-0.2, 0.3),
            }
            for cat in ("Age", "Disability_status", "Gender_identity", "Religion", "SES")
            for model in ("base", "tuned")
        ]
    )
    return {
        "figure1": figure1_png(fig1),
        "figure2": figure2_png(grid, grid / 4),
        "bbq": bbq_bars_png(bbq),
    }


@pytest.mark.slow
def test_browser_renders_report(tmp_path: Path, screenshot) -> None:
    text = (
        "Model `toy`, 3 settings.\n\n"
        + TABLE
        + "\n## Figure 1\n\n{{figure:figure1}}\n\n## Figure 2\n\n{{figure:figure2}}\n"
    )
    _, html_path = write_report(tmp_path, "SCD run report", text, synthetic_figures())
    image = screenshot(html_path, 2000)
    assert image.std() > 0.05
    # Figures are where the saturated colour is (bars, heatmap); text and tables are grey.
    saturation = image.max(axis=2) - image.min(axis=2)
    coloured_rows = np.flatnonzero((saturation > 0.3).sum(axis=1) > 20)
    assert coloured_rows.size > 300, "figures did not render"
    assert coloured_rows.min() > 200  # below the title and table, where the figures are placed
