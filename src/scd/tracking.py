"""Weights & Biases set-up that never blocks and never leaks a secret.

Without an API key, or without a route to the W&B server, runs go offline automatically
(``WANDB_MODE=offline``; sync later with ``wandb sync``). An explicit ``WANDB_MODE`` wins.
Configs are scrubbed of anything that looks like a token before they are logged or saved.
"""

from __future__ import annotations

import netrc
import os
import re
import socket
from pathlib import Path
from typing import Any

__all__ = ["SECRET_ENV", "choose_mode", "finish_run", "redact", "start_run"]

SECRET_ENV = ("WANDB_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_API_TOKEN",
              "OPENAI_API_KEY")  # fmt: skip
_SECRET_KEY = re.compile(r"(token|api_key|apikey|secret|password)", re.IGNORECASE)


def _has_key() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        auth = netrc.netrc().authenticators("api.wandb.ai")
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False
    return bool(auth and auth[2])


def _reachable(host: str = "api.wandb.ai", port: int = 443, timeout: float = 3.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def choose_mode() -> str:
    """``WANDB_MODE`` if set, else online with a key and a network, else offline."""
    return os.environ.get("WANDB_MODE") or ("online" if _has_key() and _reachable() else "offline")


def _key_envs(data: Any) -> list[str]:
    """The environment variables a config names as holding a key (``api_key_env``)."""
    if isinstance(data, dict):
        own = [v for k, v in data.items() if k == "api_key_env" and isinstance(v, str)]
        return own + [n for v in data.values() for n in _key_envs(v)]
    return [n for v in data for n in _key_envs(v)] if isinstance(data, list) else []


def redact(data: Any, secrets: list[str] | None = None) -> Any:
    """Copy of ``data`` with secret-looking keys and the values of secret environment variables
    (:data:`SECRET_ENV` and those ``api_key_env`` names) replaced; a key ending in ``_env``
    names a variable and is kept."""
    if secrets is None:
        names = [*SECRET_ENV, *_key_envs(data)]
        # a placeholder such as OPENAI_API_KEY=EMPTY (local servers) is no secret to hunt for
        secrets = [os.environ[k] for k in names if len(os.environ.get(k) or "") >= 8]
    if isinstance(data, dict):
        return {k: "<redacted>" if _secret_key(k) and v else redact(v, secrets)
                for k, v in data.items()}  # fmt: skip
    if isinstance(data, list):
        return [redact(v, secrets) for v in data]
    if isinstance(data, str):
        for secret in secrets:
            data = data.replace(secret, "<redacted>")
    return data


def _secret_key(key: Any) -> bool:
    return bool(_SECRET_KEY.search(str(key))) and not str(key).endswith("_env")


def start_run(
    *, config: dict[str, Any], directory: Path, run_id: str | None = None, **init: Any
) -> Any:
    """Start a W&B run with the given config, writing into ``directory``/wandb (passed to this
    run: ``WANDB_DIR`` would stick to the first run of the process); returns the run.
    ``init``: the rest of ``wandb.init``'s arguments (project, name, group, entity, job_type).

    ``run_id``: continue that run (``resume="allow"``). Offline, this writes a second segment
    of the same run id, which ``wandb sync`` uploads after the first, as one run."""
    mode = choose_mode()
    os.environ["WANDB_MODE"] = mode  # also for the transformers callback
    os.environ.setdefault("WANDB_SILENT", "true")
    directory.mkdir(parents=True, exist_ok=True)
    import wandb

    return wandb.init(
        **init,
        config=redact(config),
        dir=str(directory),
        mode=mode,
        reinit="finish_previous",
        id=run_id,
        resume="allow" if run_id else None,
    )


def finish_run(run: Any, say: Any = None) -> None:
    """Finish ``run``; an offline one says where it is and how to upload it (``say``: a line
    printer, default stderr)."""
    offline = run.settings.mode == "offline"
    where = Path(run.dir).parent  # .../wandb/offline-run-<time>-<id>
    run.finish()
    if offline:
        from scd.progress import say as stderr

        every = f"{where.parent}/offline-run-*-{run.id}"  # a resumed run's segments, oldest first
        (say or stderr)(f"W&B run {run.id} (offline) in {where}; upload: wandb sync {every}")
