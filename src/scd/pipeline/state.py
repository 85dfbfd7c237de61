"""A run directory's bookkeeping: the recipe it holds and the finished stages.

``RUN/recipe.json`` holds the resolved recipe (a different recipe into the same directory is refused
with the keys that differ; a recipe held by an earlier scd is read with this one's defaults for
the keys it added, and a recipe that only adds arms takes the run over, its arms joining the
finished ones); ``RUN/state.json`` lists the finished stages, rewritten atomically
after each one, so a killed run resumes at the first unfinished stage (and, inside an evaluation
or a training, at its last chunk or checkpoint).
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

from scd.config.loader import fixed_part
from scd.errors import InputError
from scd.io import write_json

__all__ = ["RunState"]


def _diff(old: Any, new: Any, prefix: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        keys = sorted(set(old) | set(new))
        return [d for k in keys for d in _diff(old.get(k), new.get(k), f"{prefix}{k}.")]
    return [] if old == new else [prefix.rstrip(".")]


def _with_defaults(recipe: dict[str, Any]) -> dict[str, Any]:
    """A held recipe as this scd resolves it: the keys it added since, at their defaults (a
    recipe this scd cannot read stays as it was held, and differs where it differs)."""
    from scd.pipeline.recipe import recipe_from_dict

    try:
        return recipe_from_dict(recipe, "recipe.json").to_dict()
    except InputError:
        return recipe


def _arms_added(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether ``new`` only adds arms to ``old``'s (each of old's, in its order, then more);
    then the arms leave both, so that nothing else may differ."""
    before, after = old.get("arms"), new.get("arms")
    if not before or not after or len(after) <= len(before) or after[: len(before)] != before:
        return False
    old.pop("arms"), new.pop("arms")
    return True


class RunState:
    """The run directory ``path``: the recipe it holds and its finished stages."""

    def __init__(self, path: Path, recipe: dict[str, Any]) -> None:
        self.path = path
        self.recipe = recipe
        self.stages: dict[str, dict[str, Any]] = {}
        state = path / "state.json"
        if state.is_file():
            self.stages = json.loads(state.read_text())["stages"]

    def hold_recipe(self) -> bool:
        """Write ``recipe.json``, or check that the directory's run had the same recipe; return
        whether it was written now.

        Raises:
            InputError: the directory holds a run of another recipe.
        """
        path = self.path / "recipe.json"
        if path.is_file():
            old = fixed_part(_with_defaults(json.loads(path.read_text()).get("recipe", {})))
            new = fixed_part(self.recipe)
            grown = _arms_added(old, new)
            changed = _diff(old, new)
            if changed:
                more = f" and {len(changed) - 4} more" if len(changed) > 4 else ""
                raise InputError(
                    f"{self.path}: holds a run of another recipe ({', '.join(changed[:4])}{more} "
                    "differ); pass --run-id NEW_NAME or remove the directory"
                )
            if grown:
                self._write_recipe(path)
            return False
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise InputError(f"{self.path}: cannot write there ({err.strerror or err})") from None
        self._write_recipe(path)
        return True

    def _write_recipe(self, path: Path) -> None:
        recorded = {k: v for k, v in self.recipe.items() if k != "wandb"}  # speed keys too
        write_json(path, {"kind": "scd_run", "run_id": self.path.name, "recipe": recorded})

    def release_recipe(self) -> None:
        """Take back ``recipe.json`` of a run that finished no stage (it failed: bad input, an
        error, Ctrl-C): the corrected recipe may then run in the same directory. The directory
        goes too when nothing else is left in it. (A run killed outright cannot take it back:
        its directory then refuses another recipe until removed or another --run-id is given.)"""
        if self.stages or (self.path / "state.json").is_file():
            return
        (self.path / "recipe.json").unlink(missing_ok=True)
        (self.path / "layout.json").unlink(missing_ok=True)  # written with the plan
        (self.path / ".state.lock").unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # other files left: they block nothing
            self.path.rmdir()

    def done(self, stage: str) -> bool:
        """Whether ``stage`` finished (and what it wrote is still there)."""
        info = self.stages.get(stage)
        return bool(info) and all(Path(p).exists() for p in info.get("outputs", []))

    def output(self, stage: str) -> Path:
        """The (first) output path a finished stage recorded."""
        return Path(self.stages[stage]["outputs"][0])

    def finish(self, stage: str, outputs: list[Path], started: float, **info: Any) -> None:
        """Record ``stage`` as finished (with its wall-clock start and end); ``state.json`` is
        re-read and replaced atomically under a file lock, so that processes finishing stages of
        one run side by side (``--launcher ray``) keep each other's records."""
        from filelock import FileLock

        seconds, now = time.perf_counter() - started, time.time()
        entry = {
            "outputs": [str(p) for p in outputs],
            "seconds": round(seconds, 1),
            "started_at": round(now - seconds, 3),
            "finished_at": round(now, 3),
            **info,
        }
        with FileLock(str(self.path / ".state.lock")):
            path = self.path / "state.json"
            if path.is_file():  # other processes' stages too (ours keep their order)
                for name, done in json.loads(path.read_text())["stages"].items():
                    self.stages.setdefault(name, done)
            self.stages[stage] = entry
            write_json(path, {"stages": self.stages})
