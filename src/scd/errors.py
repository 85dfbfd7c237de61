"""Errors the command line reports as one line with exit code 2."""

from __future__ import annotations

from typing import Any

__all__ = ["InputError", "RunFailed", "cut_line", "first_line"]

_UNSET: Any = object()


def first_line(err: BaseException, limit: int = 200) -> str:
    """A library error's first line (its type's name when it has no message): the cause inside a
    one-line :class:`InputError`. A line longer than ``limit`` is cut at the last space before it
    that stands outside brackets and quotes, and marked `` ...``, so that no value (a shape, a
    path, a quoted name) is cut in half; with no such space it is kept whole."""
    return cut_line((str(err).strip().splitlines() or [type(err).__name__])[0], limit)


def cut_line(line: str, limit: int = 200) -> str:
    """``line`` cut to about ``limit`` characters between values (see :func:`first_line`)."""
    if len(line) <= limit:
        return line
    depth, quote, cut = 0, "", 0
    for i, char in enumerate(line[:limit]):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"" and (i == 0 or not line[i - 1].isalnum()):  # not "couldn't"
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(depth - 1, 0)
        elif char == " " and depth == 0:
            cut = i
    return f"{line[:cut].rstrip(',;:')} ..." if cut else line


class InputError(ValueError):
    """Bad user input: a file, key or value that is not what is expected.

    An error about one option carries its ``key`` (the library's parameter name, e.g.
    ``max_model_len``) and ``value``, so that each caller names it the way its user gave it:
    ``str(err)`` names the command-line flag (``--max-model-len 8192: ...``), ``scd run`` the
    recipe key (:meth:`render`).
    """

    def __init__(self, detail: str, *, key: str | None = None, value: Any = _UNSET) -> None:
        super().__init__(detail)
        self.detail, self.key, self.value = detail, key, value

    def render(self, name: str | None = None) -> str:
        """The message with the option called ``name`` (default: its command-line flag)."""
        if self.key is None:
            return self.detail
        label = name or "--" + self.key.replace("_", "-")
        shown = "" if self.value is _UNSET or self.value is None else f" {self.value}"
        return f"{label}{shown}: {self.detail}"

    def __str__(self) -> str:
        return self.render()


class RunFailed(RuntimeError):
    """Tasks of a run failed (``scd run --launcher ray``): one line per failed task; the command
    line reports them with exit code 1."""
