"""A run directory written by an earlier scd, brought to this one's layout when ``scd run``,
``scd report RUN_DIR`` or ``validation/study.py`` opens it (:func:`migrate_run`).

An earlier scd kept SCD's own arm (``sft``) in ``setting-N`` itself -- ``setting-N/adapter/``
(``setting-N/seed-S/adapter/`` with ``arena.seeds``), ``setting-N/eval/<job>/``,
``setting-N/capability/``; its stages ``setting-N/train``, ``setting-N/eval/<job>``,
``setting-N/push`` -- beside the setting's SFT data (``setting-N/sft/``) and the other arms
(``setting-N/arm-<name>/``). Now every arm lives in ``setting-N/arm-<name>/``, SCD's in
``setting-N/arm-sft/``; the setting's data stays where it was. The migration:

1. rewrites, in each file of an old entry (and of one moved already) that names paths
   (``*.json``, ``*.yaml``, ``*.md``: an evaluation's ``run.json`` -- its identity, compared
   when an unfinished evaluation resumes -- ``summary.json`` and ``tables.md``; the adapter's
   manifests, ``recipe.yaml``, model card and its checkpoints' ``trainer_state.json``; W&B's own
   folders are left as they were), each ``setting-N/<old entry>`` to
   ``setting-N/arm-sft/<old entry>``;
2. moves each old entry into ``setting-N/arm-sft/`` (one rename each; it replaces nothing);
3. rewrites ``report.md``, ``report.html`` and ``layout.json`` (each atomically);
4. rewrites ``state.json`` last, atomically: the stage names and their outputs, so that every
   finished stage is found finished, its results where they now are.

Each step only turns old names into new ones: run again, it changes nothing, and a migration
interrupted anywhere completes the next time the directory is opened (old entries left: steps
1-4; none, but ``state.json`` or ``layout.json`` naming old paths: steps 3-4). Base-model
results (the shared cache) and the other arms' files name no path of SCD's arm.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

from scd.config.vocabulary import SCD_ARM
from scd.errors import InputError
from scd.io import atomic_file, write_json

__all__ = ["migrate_run", "new_path", "old_entries"]

# what an earlier scd wrote of SCD's arm in setting-N (its task's home: worker.pid, and
# train_recipe.yaml under torchrun), and the stages it named there
_OLD = r"adapter|eval|capability|seed-\d+|worker\.pid|train_recipe\.yaml"
_ENTRY = re.compile(rf"(?:{_OLD})|\.adapter\..+")  # .adapter.*: an atomic write's leftover
_OLD_PATH = re.compile(rf"(?<![\w.-])(setting-\d+)/(?=(?:{_OLD}|train|push)(?![\w.-]))".encode())
_SETTING = re.compile(r"setting-\d+")
_TEXT = (".json", ".yaml", ".md")
_ROOT = ("report.md", "report.html", "layout.json")


def new_path(text: str) -> str:
    """``text`` with each path (or stage name) of SCD's arm in an earlier scd's layout,
    ``setting-N/<old entry>``, as this scd's, ``setting-N/arm-sft/<old entry>``."""
    return _new(text.encode()).decode()


def _new(data: bytes) -> bytes:
    return _OLD_PATH.sub(rb"\1/arm-" + SCD_ARM.encode() + rb"/", data)


def old_entries(run_dir: Path) -> list[Path]:
    """What an earlier scd wrote of SCD's arm directly in the run's ``setting-N`` directories."""
    return [e for s in _settings(run_dir) for e in sorted(s.iterdir()) if _ENTRY.fullmatch(e.name)]


def _settings(run_dir: Path) -> list[Path]:
    return [
        s for s in sorted(run_dir.glob("setting-*")) if _SETTING.fullmatch(s.name) and s.is_dir()
    ]


def _moved(run_dir: Path) -> list[Path]:
    """What a migration (or a hand) moved into ``setting-N/arm-sft`` already."""
    arms = [s / f"arm-{SCD_ARM}" for s in _settings(run_dir)]
    return [e for a in arms if a.is_dir() for e in sorted(a.iterdir())]


def _names_old_paths(run_dir: Path) -> bool:
    files = [run_dir / "state.json", run_dir / "layout.json"]
    return any(p.is_file() and _OLD_PATH.search(p.read_bytes()) for p in files)


def migrate_run(run_dir: Path | str, say: Callable[[str], None] = print) -> bool:
    """Bring ``run_dir`` from an earlier scd's layout to this one's (module docstring), under
    the run's state lock; return whether anything was to do (False: already this scd's, or
    no run directory).

    Raises:
        InputError: the place an old entry moves to is taken, or the directory is read-only.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir() or not (old_entries(run_dir) or _names_old_paths(run_dir)):
        return False
    from filelock import FileLock

    try:
        with FileLock(str(run_dir / ".state.lock")):
            entries = old_entries(run_dir)
            for entry in [*entries, *_moved(run_dir)]:  # those moved: an interrupted migration
                _rewrite_tree(entry)
            for entry in entries:
                _move(entry)
            for name in _ROOT:
                _rewrite(run_dir / name)
            _rewrite_state(run_dir / "state.json")
    except OSError as err:
        raise InputError(
            f"{run_dir}: holds an earlier scd's layout and cannot be brought to this one's "
            f"({err.strerror or err})"
        ) from None
    moved = ", ".join(str(e.relative_to(run_dir)) for e in entries)
    how = f"moved {moved} into" if moved else "an interrupted move into"
    say(f"{run_dir}: an earlier scd's layout: {how} setting-<N>/arm-{SCD_ARM}/, paths rewritten")
    return True


def _rewrite(path: Path) -> None:
    """``path`` with its old paths rewritten (atomically; untouched when it names none)."""
    if not path.is_file() or path.is_symlink():
        return
    data = path.read_bytes()
    new = _new(data)
    if new != data:
        with atomic_file(path) as tmp:
            tmp.write_bytes(new)


def _rewrite_tree(entry: Path) -> None:
    """Step 1 for one old entry: each of its files that names paths (not W&B's folders)."""
    if entry.is_file():
        if entry.suffix in _TEXT:
            _rewrite(entry)
        return
    for folder, dirs, files in os.walk(entry):
        dirs[:] = [d for d in dirs if d != "wandb"]
        for name in files:
            if Path(name).suffix in _TEXT and not name.startswith("."):
                _rewrite(Path(folder) / name)


def _move(entry: Path) -> None:
    """Step 2 for one old entry: into ``setting-N/arm-sft/``, replacing nothing."""
    target = entry.parent / f"arm-{SCD_ARM}" / entry.name
    if target.exists() or target.is_symlink():
        raise InputError(
            f"{entry}: SCD's arm as an earlier scd kept it, to move to {target}, which is "
            "taken; move or remove one of them"
        )
    target.parent.mkdir(exist_ok=True)
    entry.rename(target)


def _rewrite_state(path: Path) -> None:
    """Step 4: ``state.json``'s stage names and outputs, written as :class:`RunState` writes it
    (atomically)."""
    if not path.is_file():
        return
    data = path.read_bytes()
    new = _new(data)
    if new != data:
        write_json(path, json.loads(new))
