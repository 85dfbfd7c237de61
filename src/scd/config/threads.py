"""How many threads torch computes with: what this process may really use, one for small models.

torch sizes its intra-op pool by ``OMP_NUM_THREADS``, else the machine's physical cores (OpenMP
narrows that to the affinity mask), never by a cgroup CPU quota: a container or a cluster job
given 2 CPUs of a 64-core node computes with 64 threads. And on cores that other work shares, each
threaded operation waits at its end for its slowest thread, which another process may hold off
the core for a time slice, while OpenMP's waiting threads spin: beside two busy processes on 2
cores a training step of a 2.3M-parameter model took 3.3 s on two threads against 0.27 s on one
(BENCHMARKS.md, "Threads that fit the machine").

The rule (:func:`choose_threads`), first match wins:

1. ``SCD_THREADS`` (``--threads`` sets it): a positive number of threads, ``auto`` (this rule),
   or ``torch`` (leave torch's own choice alone, as scd did before);
2. ``OMP_NUM_THREADS``, the variable torch itself reads (torchrun and Ray set it per process);
3. one thread for a model under :data:`SMALL_MODEL` parameters (the toy model: 0.14M);
4. the CPUs this process may use: its affinity mask (``os.sched_getaffinity``), capped by the
   cgroup CPU quota (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us / cpu.cfs_period_us``) rounded down,
   at least 1 -- a thread beyond the quota only waits for it.

The ``scd`` commands that compute with torch also set ``OMP_WAIT_POLICY=PASSIVE`` (unless it is
set, or ``SCD_THREADS=torch``) before torch loads: OpenMP's threads then sleep between operations
rather than spin, which beside other work is what keeps two threads from being many times slower
than one. A program that imports torch itself sets it (or not) before that import.

:func:`use_threads` applies the rule where scd starts torch work (the toy model's build, the hf
engine's load, training), says it once per process on stderr (``threads: 1 (a small model ...)``)
and keeps it for the records (:func:`chosen`: an evaluation's ``run.json``, the training
manifest's ``ran``, ``toy_model.json``). Importing this module does not import torch.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from scd.errors import InputError

__all__ = [
    "ENV",
    "SMALL_MODEL",
    "ThreadChoice",
    "affinity_cpus",
    "cgroup_cpus",
    "check_env",
    "choose_threads",
    "chosen",
    "n_parameters",
    "use_threads",
]

ENV = "SCD_THREADS"
# parameters below which a second thread gains nothing even on idle cores once OpenMP's threads
# sleep between operations (2 idle cores, BENCHMARKS.md: a training step of 0.34M parameters took
# 36 ms on one thread, 35-39 ms on two; of 0.84M 68 vs 54 ms; of 2.3M 173 vs 110 ms): the toy
# model (0.14M; 0.22M with a steering layer) is below, SmolLM2-135M far above
SMALL_MODEL = 500_000
CGROUP = Path("/sys/fs/cgroup")
SELF_CGROUP = Path("/proc/self/cgroup")


@dataclass(frozen=True)
class ThreadChoice:
    """The threads torch computes with, and why: ``threads`` (None: torch's own choice, filled
    in when applied), ``why`` (the rule that chose), ``cpus`` (what this process may use:
    ``affinity`` CPUs, ``quota`` CPUs of a cgroup quota or None)."""

    threads: int | None
    why: str
    affinity: int
    quota: float | None

    @property
    def cpus(self) -> int:
        """CPUs this process may use: its affinity capped by its quota, rounded down, >= 1."""
        if self.quota is None:
            return self.affinity
        return max(1, min(self.affinity, math.floor(self.quota)))

    def line(self) -> str:
        """``threads: 1 (a small model, 0.34M parameters; 2 CPUs available)``."""
        quota = f", a CPU quota of {self.quota:g}" if self.quota is not None else ""
        shown = self.threads if self.threads is not None else "torch's default"
        return f"threads: {shown} ({self.why}; {self.affinity} CPUs available{quota})"

    def record(self) -> dict[str, Any]:
        """What a result records (``run.json``'s ``threads``)."""
        return asdict(self)


def _count(text: str | None, name: str) -> int | str | None:
    """A thread count from an environment variable: a positive integer, ``auto`` / unset (None)
    or ``torch``.

    Raises:
        InputError: anything else, naming the variable.
    """
    value = (text or "").strip().lower()
    if value in ("", "auto"):
        return None
    if value == "torch":
        return "torch"
    if value.isdigit() and int(value) > 0:
        return int(value)
    raise InputError(
        f"{name}={text!r}: expected a positive number of threads, auto (scd's rule) or torch "
        "(torch's own default)"
    )


def _omp(text: str | None) -> int | None:
    """``OMP_NUM_THREADS`` as torch reads it: a positive integer (the first of a list), else
    None (torch ignores it too)."""
    first = (text or "").split(",")[0].strip()
    return int(first) if first.isdigit() and int(first) > 0 else None


def choose_threads(
    affinity: int,
    quota: float | None,
    params: int | None,
    override: str | None = None,
    omp: str | None = None,
) -> ThreadChoice:
    """The threads for a model of ``params`` parameters (None: not known) in a process that may
    use ``affinity`` CPUs under a cgroup quota of ``quota`` CPUs (None: none); ``override``: the
    value of ``SCD_THREADS``, ``omp``: of ``OMP_NUM_THREADS`` (see the module docstring).

    Raises:
        InputError: ``override`` is not a positive integer, ``auto`` or ``torch``.
    """
    asked = _count(override, ENV)
    base = {"affinity": max(1, affinity), "quota": quota}
    if asked == "torch":
        return ThreadChoice(None, f"{ENV}=torch", **base)
    if isinstance(asked, int):
        return ThreadChoice(asked, f"{ENV} or --threads", **base)
    if (n := _omp(omp)) is not None:
        return ThreadChoice(n, "OMP_NUM_THREADS", **base)
    if params is not None and params < SMALL_MODEL:
        return ThreadChoice(1, f"a small model, {params / 1e6:.2f}M parameters", **base)
    cpus = ThreadChoice(None, "", **base).cpus
    return ThreadChoice(cpus, "one per usable CPU", **base)


def check_env() -> int | str | None:
    """``SCD_THREADS`` checked before any work (the commands that load torch call it): a
    number, ``torch``, or None (the rule).

    Raises:
        InputError: a value that is not a positive integer, ``auto`` or ``torch``.
    """
    return _count(os.environ.get(ENV), ENV)


def affinity_cpus() -> int:
    """CPUs this process may run on (its affinity mask; the machine's count where there is
    none)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def _limit_v2(path: Path) -> float | None:
    """``cpu.max`` (``max 100000`` or ``150000 100000``) as CPUs, None: no limit or no file."""
    try:
        quota, period = path.read_text().split()[:2]
        return int(quota) / int(period) if quota != "max" and int(period) > 0 else None
    except (OSError, ValueError):
        return None


def _limit_v1(folder: Path) -> float | None:
    """``cpu.cfs_quota_us / cpu.cfs_period_us`` as CPUs, None: -1 (no limit) or no file."""
    try:
        quota = int((folder / "cpu.cfs_quota_us").read_text())
        period = int((folder / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def _up(base: Path, path: str) -> list[Path]:
    """``base/path`` and each folder above it up to ``base``: a limit on any of them holds."""
    here, out = base / path.strip("/"), []
    while True:
        out.append(here)
        if here == base or base not in here.parents:
            return out
        here = here.parent


def cgroup_cpus(root: Path = CGROUP, self_cgroup: Path = SELF_CGROUP) -> float | None:
    """The CPUs this process's cgroup quota allows (the smallest on its path), or None: no
    quota (or no cgroup file system). cgroup v2 (``cpu.max``) and v1 (``cpu.cfs_quota_us``),
    also mounted side by side (v2 under ``unified``)."""
    try:
        lines = self_cgroup.read_text().splitlines()
    except OSError:
        lines = []
    limits: list[float | None] = []
    for line in lines or ["0::/", "1:cpu:/"]:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":  # v2: one hierarchy
            for base in (root, root / "unified"):
                limits += [_limit_v2(d / "cpu.max") for d in _up(base, path)]
        elif "cpu" in controllers.split(","):  # v1: the cpu controller's own mount
            for mount in dict.fromkeys((controllers, "cpu", "cpu,cpuacct", "cpuacct,cpu")):
                if (root / mount).is_dir():
                    limits += [_limit_v1(d) for d in _up(root / mount, path)]
                    break
    found = [x for x in limits if x is not None]
    return min(found) if found else None


def n_parameters(model: Any) -> int:
    """A torch model's parameter count."""
    return sum(p.numel() for p in model.parameters())


_chosen: ThreadChoice | None = None


def use_threads(params: int | None) -> ThreadChoice:
    """Set torch's intra-op threads by the rule (see the module docstring) for a model of
    ``params`` parameters, say the choice on stderr when it is new in this process, and keep it
    for :func:`chosen`. Imports torch.

    Raises:
        InputError: ``SCD_THREADS`` is not a positive integer, ``auto`` or ``torch``.
    """
    global _chosen
    import torch

    env = os.environ
    choice = choose_threads(
        affinity_cpus(), cgroup_cpus(), params, env.get(ENV), env.get("OMP_NUM_THREADS")
    )
    if choice.threads is None:
        choice = ThreadChoice(torch.get_num_threads(), choice.why, choice.affinity, choice.quota)
    elif torch.get_num_threads() != choice.threads:
        torch.set_num_threads(choice.threads)
    if _chosen is None or _chosen != choice:
        print(choice.line(), file=sys.stderr, flush=True)
    _chosen = choice
    return choice


def chosen() -> dict[str, Any] | None:
    """The last choice :func:`use_threads` applied in this process (its :meth:`~ThreadChoice.
    record` and ``OMP_WAIT_POLICY``), None before any."""
    if _chosen is None:
        return None
    return {**_chosen.record(), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY")}
