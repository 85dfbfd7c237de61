"""What every resumable evaluation does around its loop: start the engine, pin the run, write
the result files atomically."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from scd.errors import InputError
from scd.eval.engines import SharedEngine, make_engine, require_adapter
from scd.eval.formatting import Formatter, load_tokenizer
from scd.eval.records import check_run_config

__all__ = ["require_adapter", "start_run", "write_results"]


def start_run(
    out: Path,
    config: dict[str, Any],
    *,
    model: str,
    adapter: str | None,
    backend: str,
    system_prompt: str | None,
    engine_options: dict[str, Any],
    progress: bool = True,
    engine: SharedEngine | None = None,
) -> tuple[Any, Formatter]:
    """Load tokenizer and engine, then create ``out`` and pin ``run.json``.

    ``model`` may be a directory, a Hub id or a GGUF file (converted once, see
    :mod:`scd.models`). ``engine``: an engine shared by several evaluations of the same model
    (built on first use, switched to ``adapter``); without it the engine is made here. Only a run
    whose model loaded leaves files behind.
    """
    from scd.models import resolve_model

    model = resolve_model(model)
    if progress and sys.stderr.isatty():  # piped stderr keeps bad input to one line
        extra = f" + adapter {adapter}" if adapter else ""
        print(f"loading {model}{extra} ({backend}) ...", file=sys.stderr, flush=True)
    tokenizer = load_tokenizer(model, adapter)
    fmt = Formatter(tokenizer, system_prompt)
    if engine is not None:
        if (engine.backend, engine.model) != (backend, model):
            raise ValueError(f"a shared engine of {engine.model} ({engine.backend}) cannot "
                             f"evaluate {model} ({backend})")  # fmt: skip
        running = engine.get(tokenizer, adapter)
    else:
        adapters = [adapter] if adapter else []
        running = make_engine(
            backend, model, tokenizer=tokenizer, adapters=adapters, **engine_options
        )
        running.use_adapter(adapter)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"--out {out}: cannot write there ({err.strerror or err})") from None
    check_run_config(out, config)
    return running, fmt


def write_results(out: Path, files: dict[str, str]) -> None:
    """Write each ``name -> text`` into ``out`` through a temporary file and a rename."""
    for name, text in files.items():
        tmp = out / f".{name}.{os.getpid()}"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, out / name)
