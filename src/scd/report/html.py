"""Markdown report → a self-contained HTML page (inline CSS, figures as base64 data URIs).

Figures are placed with a placeholder line: a line holding only ``{{figure:NAME}}`` (surrounding
spaces allowed, outside fenced code blocks), NAME being a key of ``figures`` made of letters,
digits, ``_``, ``-`` and ``.``. Figures not placed anywhere are appended under a final
"Figures" heading, in ``figures`` order. A placeholder naming a figure that is not given is an
error, as is a Markdown image (``![alt](src)``), which could not be self-contained.

Markdown is CommonMark plus GFM tables (markdown-it-py); raw HTML in the Markdown is escaped, not
passed through. Table cells that hold a number (``12.3``, ``-0.25``, ``45.0 %``, ``0.39 ± 0.02``)
are right-aligned.
"""

from __future__ import annotations

import base64
import html
import re
from importlib.resources import files
from pathlib import Path

from markdown_it import MarkdownIt

from scd.errors import InputError
from scd.io import atomic_file

__all__ = ["anchor", "render_html", "render_markdown", "write_report"]

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_NAME = r"[A-Za-z0-9_.-]+"
_PLACEHOLDER = re.compile(r"^\s*\{\{figure:(" + _NAME + r")\}\}\s*$")
_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
_NUMERIC = re.compile(r"^[-+−]?(\d[\d,]*(\.\d*)?|\.\d+)\s*%?(\s*±\s*\d[\d,]*(\.\d*)?\s*%?)?$")

CSS = (files("scd.report") / "report.css").read_text(encoding="utf-8")  # the page's style


def anchor(heading: str) -> str:
    """A heading's anchor, as GitHub makes it: lower case, punctuation dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _inline_text(tokens: list, idx: int) -> str:
    """The text of the inline token after ``tokens[idx]`` ("" when there is none)."""
    after = tokens[idx + 1] if idx + 1 < len(tokens) else None
    return after.content if after is not None and after.type == "inline" else ""


def _markdown_it() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False}).enable("table")

    def table_open(renderer, tokens, idx, options, env):
        return '<div class="table-wrap">\n' + renderer.renderToken(tokens, idx, options, env)

    def table_close(renderer, tokens, idx, options, env):
        return renderer.renderToken(tokens, idx, options, env) + "</div>\n"

    def td_open(renderer, tokens, idx, options, env):
        if _NUMERIC.match(_inline_text(tokens, idx).strip()):
            tokens[idx].attrJoin("class", "num")
        return renderer.renderToken(tokens, idx, options, env)

    def image(renderer, tokens, idx, options, env):
        src = tokens[idx].attrGet("src")
        raise InputError(
            f"report markdown: image {src!r} cannot be embedded; use a {{{{figure:NAME}}}} line"
        )

    def heading_open(renderer, tokens, idx, options, env):  # an anchor for the contents
        tokens[idx].attrSet("id", anchor(_inline_text(tokens, idx)))
        return renderer.renderToken(tokens, idx, options, env)

    for rule in (heading_open, table_open, table_close, td_open, image):
        md.add_render_rule(rule.__name__, rule)
    return md


def _check_figures(figures: dict[str, bytes]) -> None:
    for name, data in figures.items():
        if not re.fullmatch(_NAME, name):
            raise InputError(f"figure name {name!r}: use letters, digits, '_', '-' and '.' only")
        if not isinstance(data, bytes) or not data.startswith(PNG_MAGIC):
            raise InputError(f"figure {name!r}: not PNG bytes")


def _starts_with_h1(markdown_text: str) -> bool:
    first = next((ln for ln in markdown_text.splitlines() if ln.strip()), "")
    return re.match(r"^\s{0,3}#(\s|$)", first) is not None


def _split(markdown_text: str, figures: dict[str, bytes]) -> list[tuple[str, str]]:
    """Split Markdown into ``("md", text)`` and ``("figure", name)`` parts, appending unused
    figures under a "Figures" heading."""
    parts: list[tuple[str, str]] = []
    chunk: list[str] = []
    fence: str | None = None
    used: list[str] = []
    for line in markdown_text.splitlines():
        opener = _FENCE.match(line)
        if fence is None and opener:
            fence = opener.group(1)[0] * 3
        elif fence is not None and line.strip().startswith(fence):
            fence = None
        placeholder = _PLACEHOLDER.match(line) if fence is None else None
        if placeholder is None:
            chunk.append(line)
            continue
        name = placeholder.group(1)
        if name not in figures:
            known = ", ".join(sorted(figures)) or "none"
            raise InputError(f"report markdown: no figure named {name!r} (given: {known})")
        parts += [("md", "\n".join(chunk)), ("figure", name)]
        used.append(name)
        chunk = []
    parts.append(("md", "\n".join(chunk)))
    unused = [name for name in figures if name not in used]
    if unused:
        parts.append(("md", "## Figures"))
        for name in unused:
            parts += [("md", f"### {name}"), ("figure", name)]
    return [(kind, text) for kind, text in parts if kind == "figure" or text.strip()]


def render_markdown(markdown_text: str, figures: dict[str, bytes] | None = None) -> str:
    """The Markdown file of a report: placeholders become ``![NAME](figures/NAME.png)`` (the
    ``figures``, PNG bytes by name, that :func:`write_report` writes there); the text ends in a
    newline, unused figures appended under "Figures".

    Raises:
        InputError: a placeholder names a missing figure, or a figure is invalid.
    """
    figures = dict(figures or {})
    _check_figures(figures)
    blocks = [
        f"![{text}](figures/{text}.png)" if kind == "figure" else text.strip("\n")
        for kind, text in _split(markdown_text, figures)
    ]
    return "\n\n".join(blocks) + "\n"


def render_html(title: str, markdown_text: str, figures: dict[str, bytes] | None = None) -> str:
    """Render a report as one self-contained HTML page.

    The page has inline CSS, no scripts and no external resources: figures are embedded as
    ``data:image/png;base64`` URIs. ``title`` (escaped) is the page title and, unless the
    Markdown already starts with a level-1 heading, is shown as one.

    Raises:
        InputError: a placeholder names a missing figure, a figure is not PNG bytes or has a
            bad name, or the Markdown holds an image.
    """
    figures = dict(figures or {})
    _check_figures(figures)
    md = _markdown_it()
    body: list[str] = []
    if not _starts_with_h1(markdown_text):
        body.append(f"<h1>{html.escape(title)}</h1>\n")
    for kind, text in _split(markdown_text, figures):
        if kind == "md":
            body.append(md.render(text))
        else:
            data = base64.b64encode(figures[text]).decode("ascii")
            alt = html.escape(text, quote=True)
            body.append(
                f'<figure id="figure-{alt}"><img alt="{alt}" '
                f'src="data:image/png;base64,{data}"></figure>\n'
            )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(title)}</title>\n<style>{CSS}</style>\n</head>\n"
        f"<body>\n<main>\n{''.join(body)}</main>\n</body>\n</html>\n"
    )


def write_report(
    out_dir: Path | str,
    title: str,
    markdown_text: str,
    figures: dict[str, bytes] | None = None,
) -> tuple[Path, Path]:
    """Write ``report.md``, ``figures/NAME.png`` and a self-contained ``report.html``.

    ``report.md`` starts with ``# title`` unless the Markdown already starts with a level-1
    heading. Both documents are rendered (and so validated) before anything is written; each file is
    written atomically (:func:`scd.io.atomic_file`), ``out_dir`` created if needed; other files
    in it are left. Returns the paths of ``report.md`` and ``report.html``.

    Raises:
        InputError: as :func:`render_html`.
    """
    out_dir = Path(out_dir)
    figures = dict(figures or {})
    page = render_html(title, markdown_text, figures)
    text = render_markdown(markdown_text, figures)
    if not _starts_with_h1(markdown_text):
        text = f"# {title}\n\n{text}"
    md_path, html_path = out_dir / "report.md", out_dir / "report.html"
    outputs = {out_dir / "figures" / f"{name}.png": data for name, data in figures.items()}
    outputs.update({md_path: text.encode("utf-8"), html_path: page.encode("utf-8")})
    for path, data in outputs.items():  # figures first, so the documents never point at nothing
        with atomic_file(path) as tmp:
            tmp.write_bytes(data)
    return md_path, html_path
