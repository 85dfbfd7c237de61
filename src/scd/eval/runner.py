"""What every resumable evaluation does around its loop: start the engine, pin the run, write
the result files atomically."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from scd.errors import InputError
from scd.eval.engines import make_engine
from scd.eval.formatting import Formatter, load_tokenizer
from scd.eval.records import check_run_config

__all__ = ["require_adapter", "start_run", "write_results"]


def require_adapter(adapter: str | Path | None) -> None:
    """Refuse an ``--adapter`` that is not a PEFT adapter directory."""
    if adapter and not (Path(adapter) / "adapter_config.json").is_file():
        raise InputError(f"--adapter {adapter}: no adapter_config.json (a PEFT adapter dir)")


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
) -> tuple[Any, Formatter]:
    """Load tokenizer and engine, then create ``out`` and pin ``run.json``.

    ``model`` may be a directory, a Hub id or a GGUF file (converted once, see
    :mod:`scd.models`). Only a run whose model loaded leaves files behind.
    """
    from scd.models import resolve_model

    model = resolve_model(model)
    if progress and sys.stderr.isatty():  # piped stderr keeps bad input to one line
        extra = f" + adapter {adapter}" if adapter else ""
        print(f"loading {model}{extra} ({backend}) ...", file=sys.stderr, flush=True)
    tokenizer = load_tokenizer(model, adapter)
    fmt = Formatter(tokenizer, system_prompt)
    engine = make_engine(backend, model, adapter=adapter, tokenizer=tokenizer, **engine_options)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"--out {out}: cannot write there ({err.strerror or err})") from None
    check_run_config(out, config)
    return engine, fmt


def write_results(out: Path, files: dict[str, str]) -> None:
    """Write each ``name -> text`` into ``out`` through a temporary file and a rename."""
    for name, text in files.items():
        tmp = out / f".{name}.{os.getpid()}"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, out / name)
