"""Progress of long work on stderr, readable where it lands: a tqdm bar on a terminal; in a log
file (SLURM, nohup, CI) a plain line every ``SCD_PROGRESS_SECONDS`` seconds (default 30) and at
the end -- done/total, rate, ETA -- as lm-eval and TRL write to logs; nothing when quiet."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from scd.errors import InputError

__all__ = ["Progress", "say"]


def say(text: str) -> None:
    """One line on stderr, now."""
    print(text, file=sys.stderr, flush=True)


def _seconds(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise InputError("expected seconds between progress lines, e.g. 30",
                         key="SCD_PROGRESS_SECONDS", value=value) from None  # fmt: skip


def _eta(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else (
        f"{seconds // 60}m{seconds % 60:02d}s")  # fmt: skip


class Progress:
    """``total`` items, ``done`` of them before (a resumed run says so)."""

    def __init__(self, name: str, total: int, *, done: int = 0, unit: str = "item",
                 enabled: bool = True) -> None:  # fmt: skip
        self.name, self.total, self.done, self.unit = name, total, done, unit
        self.enabled, self.first = enabled, done
        self.every = _seconds(os.environ.get("SCD_PROGRESS_SECONDS", "30"))
        self.started = self.last = time.perf_counter()
        self.bar: Any = None
        if enabled and done:
            say(f"{name}: resuming at {done:,}/{total:,} {unit}s (finished earlier, kept)")
        if enabled and sys.stderr.isatty():
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, initial=done, unit=unit, desc=name, dynamic_ncols=True)

    def line(self) -> str:
        """``name: 1,024/17,280 prompts (6%), 51.2 prompts/s, ETA 5m17s``."""
        rate = (self.done - self.first) / max(time.perf_counter() - self.started, 1e-9)
        eta = _eta((self.total - self.done) / rate) if rate > 0 else "?"
        pct = 100 * self.done / max(self.total, 1)
        return (f"{self.name}: {self.done:,}/{self.total:,} {self.unit}s ({pct:.0f}%), "
                f"{rate:,.1f} {self.unit}s/s, ETA {eta}")  # fmt: skip

    def update(self, n: int) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.enabled and time.perf_counter() - self.last >= self.every:
            self.last = time.perf_counter()
            say(self.line())

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.enabled and self.done > self.first:
            say(self.line().replace(", ETA 0m00s", ", done"))
