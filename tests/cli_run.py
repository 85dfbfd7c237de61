"""Run the ``scd`` command in this process and capture what it says."""

from __future__ import annotations

import contextlib
import io


def run_scd(*argv: str) -> tuple[int, str, str]:
    """``scd ARGV``: exit code, stdout and stderr (``--help`` exits 0)."""
    from scd.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exit_:  # --help
            code = exit_.code
    return code, out.getvalue(), err.getvalue()
