"""Progress of long work on stderr, readable where it lands: a tqdm bar on a terminal; in a log
file (SLURM, nohup, CI) a plain line at most every ``SCD_PROGRESS_SECONDS`` seconds (default 30)
and once at the end -- done/total, rate, ETA -- as lm-eval and TRL write to logs; nothing when
quiet.

A line moves inside a unit of work too: while :meth:`Progress.part` is open, an engine's
:func:`tick` after each of its batches moves the line through that part, so a 512-item chunk of a
slow model shows progress before it ends."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from scd.errors import InputError

__all__ = ["Progress", "say", "tick"]

_PARTS: list[tuple[Progress, int, int]] = []  # (line, items done at a part's start, size)


def say(text: str) -> None:
    """One line on stderr, now."""
    print(text, file=sys.stderr, flush=True)


def _seconds(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise InputError(
            "expected seconds between progress lines, e.g. 30",
            key="SCD_PROGRESS_SECONDS",
            value=value,
        ) from None


def _eta(seconds: float) -> str:
    seconds = int(seconds)
    return (
        f"{seconds // 3600}h{seconds // 60 % 60:02d}m"
        if seconds >= 3600
        else (f"{seconds // 60}m{seconds % 60:02d}s")
    )


class Progress:
    """``total`` items, ``done`` of them before (a resumed run says so)."""

    def __init__(
        self, name: str, total: int, *, done: int = 0, unit: str = "item", enabled: bool = True
    ) -> None:
        self.name, self.total, self.done, self.unit = name, total, done, unit
        self.enabled, self.first = enabled, done
        self.every = _seconds(os.environ.get("SCD_PROGRESS_SECONDS", "30"))
        self.started = self.last = time.perf_counter()
        self.bar: Any = None
        self.status = ""  # e.g. the last loss, shown after the counts
        if enabled and done:
            say(f"{name}: resuming at {done:,}/{total:,} {unit}s (finished earlier, kept)")
        if enabled and sys.stderr.isatty():
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, initial=done, unit=unit, desc=name, dynamic_ncols=True)

    def line(self, final: bool = False, stopped: bool = False) -> str:
        """``name: 1,024/17,280 prompts (6%), 51.2 prompts/s, ETA 5m17s`` (``done`` if final,
        ``stopped`` if the work was interrupted)."""
        rate = (self.done - self.first) / max(time.perf_counter() - self.started, 1e-9)
        eta = _eta((self.total - self.done) / rate) if rate > 0 else "?"
        pct = 100 * self.done / max(self.total, 1)
        status = f", {self.status}" if self.status else ""
        end = "stopped" if stopped else "done" if final else f"ETA {eta}"
        return (
            f"{self.name}: {self.done:,}/{self.total:,} {self.unit}s ({pct:.0f}%), "
            f"{rate:,.1f} {self.unit}s/s{status}, {end}"
        )

    def note(self, status: str) -> None:
        """A short status shown after the counts from now on (a loss, an accuracy)."""
        self.status = status
        if self.bar is not None:
            self.bar.set_postfix_str(status)

    def update(self, n: int) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        elif (
            self.enabled
            and self.done < self.total  # the last line is close()'s
            and time.perf_counter() - self.last >= self.every
        ):
            self.last = time.perf_counter()
            say(self.line())

    @contextmanager
    def part(self, size: int) -> Iterator[None]:
        """``size`` items under way: :func:`tick` moves the line within them; when the block
        ends without an error, the line stands at their end."""
        start = self.done
        _PARTS.append((self, start, size))
        try:
            yield
        finally:
            _PARTS.pop()
        if start + size > self.done:
            self.update(start + size - self.done)

    def close(self) -> None:
        """The last line: ``done``, or ``stopped`` when called while an exception propagates
        (from a ``finally`` block: Ctrl-C, a failure) -- work cut short is not done."""
        stopped = sys.exc_info()[0] is not None
        if self.bar is not None:
            self.bar.close()
        elif self.enabled and self.done > self.first:
            say(self.line(final=True, stopped=stopped))


def tick(done: int, total: int) -> None:
    """An engine finished a batch: ``done`` of the ``total`` requests of its current call. Moves
    the innermost open :meth:`Progress.part` by that share; nothing when no part is open."""
    if not _PARTS or total <= 0:
        return
    line, start, size = _PARTS[-1]
    position = start + size * min(done, total) // total
    if position > line.done:
        line.update(position - line.done)
