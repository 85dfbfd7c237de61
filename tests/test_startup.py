"""Start-up (#79): ``scd --help`` and an evaluation's ``--help`` build the whole parser without
importing a heavy library or reading the package version; ``import scd`` reads no package
metadata; ``scd --version`` still prints the installed version (BENCHMARKS.md, "Start-up")."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version

import pytest

import scd
from scd.cli import main

HEAVY = (
    "numpy",
    "torch",
    "transformers",
    "pandas",
    "pyarrow",
    "scipy",
    "statsmodels",
    "datasets",
    "huggingface_hub",
    "matplotlib",
    "sklearn",
    "vllm",
    "tqdm",  # reads package metadata at import (vllm.py's progress bar, made on first use)
    "asyncio",  # ~10 ms (the served engines' client imports it where it runs requests)
)

# Run in a fresh interpreter: records, for each heavy module, the scd frames that imported it
# first, then runs `scd ARGV` (its help thrown away) and prints what was loaded as JSON.
_PROBE = """
import contextlib, io, json, sys, traceback
heavy, argv = json.loads(sys.argv[1]), json.loads(sys.argv[2])
first = {}
class Spy:
    def find_spec(self, name, path=None, target=None):
        if name in heavy and name not in first:
            frames = [f for f in traceback.extract_stack() if "/scd/" in f.filename]
            where = [f"{f.filename.split('/scd/')[-1]}:{f.lineno}" for f in reversed(frames)]
            first[name] = " <- ".join(where) or "not scd"
sys.meta_path.insert(0, Spy())
from scd.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main(argv)
    except SystemExit as err:
        code = err.code
import scd
loaded = {m: first.get(m, "?") for m in heavy if m in sys.modules}
print(json.dumps({"code": code, "loaded": loaded, "version_read": "__version__" in vars(scd)}))
"""


def _run(argv: list[str]) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(HEAVY), json.dumps(argv)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("argv", [["--help"], ["eval", "bias", "--help"]], ids=" ".join)
def test_help_imports_no_heavy_library_and_reads_no_version(argv):
    result = _run(argv)
    assert result["code"] == 0
    command = "scd " + " ".join(argv)
    found = "; ".join(f"{name} (imported by {by})" for name, by in result["loaded"].items())
    assert not found, f"`{command}` imported {found}"
    assert not result["version_read"], f"`{command}` read scd.__version__ (importlib.metadata)"


def test_import_scd_reads_no_package_metadata():
    probe = (
        "import sys; before = 'importlib.metadata' in sys.modules; import scd; "
        "print(before, 'importlib.metadata' in sys.modules, '__version__' in vars(scd))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    before, after, read = done.stdout.split()
    if before == "True":
        pytest.skip("this interpreter imports importlib.metadata at start-up")
    assert after == "False", "`import scd` imported importlib.metadata"
    assert read == "False", "`import scd` read the package version"


def _installed() -> str:
    try:
        return version("scd")
    except PackageNotFoundError:
        return "0.0.0+source"


def test_version_is_read_when_asked_for(capsys):
    from scd import __version__  # the module's __getattr__, inside a function

    assert __version__ == scd.__version__ == _installed()
    assert vars(scd)["__version__"] == __version__  # cached after the first read
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"scd {_installed()}\n"


def test_unknown_attribute_of_scd_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        scd.nope  # noqa: B018
    assert not hasattr(scd, "nope")
