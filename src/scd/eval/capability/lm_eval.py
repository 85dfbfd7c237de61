"""lm-evaluation-harness scores of an arm (see :mod:`scd.eval.capability`)."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

from scd.errors import InputError
from scd.eval.capability.kl import same_config
from scd.io import read_json, write_json

__all__ = ["KIND_LM_EVAL", "lm_eval_scores"]

KIND_LM_EVAL = "capability_lm_eval"  # the results' scd_config kind


def _tree_sha256(path: str | None) -> str | None:
    """A digest of every file under ``path`` (names and bytes), or None."""
    if path is None:
        return None
    digest, root = hashlib.sha256(), Path(path)
    for f in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(f"{f.relative_to(root).as_posix()}\n".encode())
        digest.update(f.read_bytes())
    return digest.hexdigest()


def _flat(results: dict[str, Any]) -> dict[str, float]:
    """``{"<task>/<metric>": value}`` of lm-eval's numeric, finite metrics; the ``none`` filter
    is dropped from the name (``acc,none`` -> ``acc``, ``acc_stderr,none`` -> ``acc_stderr``),
    other filters stay (``exact_match,strict-match``)."""
    flat = {}
    for task, metrics in results.get("results", {}).items():
        for key, value in metrics.items():
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            if numeric and math.isfinite(value):  # not lm-eval's "N/A" or NaN stderr
                metric, _, filt = key.partition(",")
                flat[f"{task}/{metric if filt in ('', 'none') else key}"] = value
    return flat


def _evaluate(
    model: str,
    config: dict[str, Any],
    *,
    adapter: str | None,
    system_prompt: str | None,
    device: str,
    batch_size: int,
) -> dict[str, Any]:
    """lm-eval's results of ``config``'s tasks on the arm, JSON-safe.

    Raises:
        InputError: a task lm-eval does not know (naming ``capability.lm_eval_tasks``).
    """
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager
    from lm_eval.utils import handle_non_serializable

    from scd.models import resolve_model

    tasks, include_path = config["tasks"], config["include_path"]
    manager = TaskManager(include_path=include_path)
    if unknown := [t for t in tasks if t not in manager.all_tasks]:
        where = f" or those under {include_path}" if include_path else ""
        raise InputError(
            f"capability.lm_eval_tasks: unknown lm-eval task {unknown[0]!r} (not "
            f"among lm-eval's tasks{where})"
        )
    lm = HFLM(
        pretrained=resolve_model(model, say=lambda _: None),
        peft=adapter,
        dtype=config["dtype"],
        device=device,
        batch_size=batch_size,
        trust_remote_code=False,
        enable_thinking=False,
    )
    chat = bool(getattr(lm.tokenizer, "chat_template", None))
    results = lm_eval.simple_evaluate(
        model=lm,
        tasks=tasks,
        task_manager=manager,
        limit=config["limit"],
        system_instruction=system_prompt,
        apply_chat_template=chat,
        log_samples=False,
    )
    return json.loads(json.dumps(results or {}, default=handle_non_serializable))


def lm_eval_scores(
    model: str,
    out: Path | str,
    *,
    tasks: list[str],
    adapter: str | None = None,
    system_prompt: str | None = None,
    include_path: str | None = None,
    limit: int | None = None,
    batch_size: int = 8,
    device: str = "cpu",
    dtype: str = "auto",
) -> dict[str, float]:
    """Score an arm on lm-evaluation-harness tasks (lm-eval's own HF model and metrics).

    Args:
        model: the base model (a directory, Hub id, GGUF file or catalog name).
        out: output directory: ``lm_eval_results.json`` (lm-eval's results dict, JSON-safe, with
            this configuration as ``scd_config``) and ``lm_eval.json`` (the flat metrics).
        tasks: lm-eval task (or group) names.
        adapter: a PEFT adapter directory (lm-eval loads it unmerged), or None.
        system_prompt: given to lm-eval as its ``system_instruction``.
        include_path: a directory of extra task YAMLs (``--include_path``).
        limit: at most this many documents per task.
        batch_size, device: lm-eval's (``cpu``, ``cuda``, ...).
        dtype: weights' dtype; ``auto``: bfloat16 on CUDA, float32 elsewhere.

    Returns:
        ``{"<task>/<metric>": value}`` for lm-eval's numeric metrics (standard errors as
        ``<task>/<metric>_stderr``). An ``out`` holding this configuration's result returns it.

    Raises:
        InputError: an unknown task (naming ``capability.lm_eval_tasks``), a bad adapter, or
            ``out`` holding another configuration.
    """
    from scd.config.engine import resolve_dtype
    from scd.eval.engines import require_adapter

    out, tasks = Path(out), list(tasks)
    if not tasks:
        raise InputError("capability.lm_eval_tasks: expected at least one lm-eval task")
    require_adapter(adapter)
    config = {
        "kind": KIND_LM_EVAL,
        "model": model,
        "adapter": adapter,
        "system_prompt": system_prompt,
        "tasks": tasks,
        "include_path": include_path,
        "include_sha256": _tree_sha256(include_path),
        "limit": limit,
        "dtype": resolve_dtype(dtype, device),
    }
    results_path, flat_path = out / "lm_eval_results.json", out / "lm_eval.json"
    if flat_path.is_file() and results_path.is_file():
        old = read_json(results_path)
        same_config(old.get("scd_config") if isinstance(old, dict) else None, config, out)
        return read_json(flat_path)

    safe = _evaluate(
        model,
        config,
        adapter=adapter,
        system_prompt=system_prompt,
        device=device,
        batch_size=batch_size,
    )
    write_json(results_path, {"scd_config": config, **safe})
    write_json(flat_path, flat := _flat(safe))  # written last: the stage's "finished" mark
    return flat
