"""The reference-data layer (scd.reference_data): datasets fetched from a loopback HTTP mirror
built from the reference data, verified against their pinned checksums; a fetch that 404s, is
cut short or brings other bytes is one line and leaves nothing; a second fetch reads the cache;
and the benchmarks' --data defaults to it: with an empty SCD_DATA_DIR and the mirror, scd eval
fetches, verifies and runs; with the mirror down it stops in one line before any model loads;
with SCD_DATA_DIR at the reference data it touches no network."""

from __future__ import annotations

import http.server
import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from scd.errors import InputError
from scd.io import cache_key
from scd.reference_data import catalog, ensure, provenance, verify

# the files of each dataset the tests serve (BBQ: two categories)
SERVED = {
    "crows_pairs": None,
    "winobias": None,
    "winogender": None,
    "bbq": ["data/Age.jsonl", "data/Religion.jsonl"],
}


class _Mirror(http.server.SimpleHTTPRequestHandler):
    """Serves the mirror directory; ``/cut/...`` sends half a file under the whole file's
    Content-Length, then closes."""

    requests: list[str] = []

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        type(self).requests.append(self.path)
        if self.path.startswith("/cut/"):
            body = Path(self.directory, self.path.removeprefix("/cut/")).read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        super().do_GET()


@pytest.fixture
def mirror(shared_data: Path, tmp_path: Path) -> Iterator[str]:
    """A loopback HTTP mirror of the reference data (``<base>/<name>/<path>``); its base URL."""
    root = tmp_path / "mirror"
    for name, paths in SERVED.items():
        d = catalog()[name]
        for path in paths or d.paths():
            target = root / name / path
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(shared_data / name / path, target)
    (root / "bad" / "winogender").mkdir(parents=True)  # other bytes under a pinned name
    for f in catalog()["winogender"].files:
        (root / "bad" / "winogender" / f.path).write_text("not the file\n")
    handler = lambda *a, **k: _Mirror(*a, directory=str(root), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Mirror.requests = []
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SCD_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def test_every_declared_file_is_the_reference_datas(shared_data: Path, monkeypatch) -> None:
    monkeypatch.setenv("SCD_DATA_DIR", str(shared_data))
    for name in catalog():
        rows = verify(name)
        present = [r for r in rows if r["status"] != "missing"]
        assert present and all(r["status"] == "ok" for r in present), (name, rows)
    # BBQ's five categories absent from the reference data are pinned by their git blob id
    absent = [f for f in catalog()["bbq"].files if f.sha256 is None]
    assert len(absent) == 5 and all(f.git_blob for f in absent)


def test_a_fetch_verifies_and_a_second_reads_the_cache(mirror, empty, monkeypatch) -> None:
    monkeypatch.setenv("SCD_DATA_MIRROR", mirror)
    where = ensure("winobias")
    assert where == empty / "winobias" and all(r["status"] == "ok" for r in verify("winobias"))
    assert len(_Mirror.requests) == len(catalog()["winobias"].files)
    assert ensure("bbq", SERVED["bbq"]) == empty / "bbq" / "data"  # the categories asked for
    assert sorted(p.name for p in (empty / "bbq" / "data").iterdir()) == [
        "Age.jsonl",
        "Religion.jsonl",
    ]
    monkeypatch.setenv("SCD_DATA_MIRROR", "http://127.0.0.1:9")  # nothing listens there
    assert ensure("winobias") == where  # present and verified: no fetch
    found = provenance({"data": where / "female_occupations.txt"})
    assert found and found["name"] == "winobias" and found["commit"].startswith("0bce984")


@pytest.mark.parametrize(
    ("mirror_path", "said"),
    [("missing", "HTTP 404"), ("cut", "cut short"), ("bad", "not the pinned file")],
)
def test_a_failed_fetch_is_one_line_and_leaves_nothing(
    mirror, empty, monkeypatch, mirror_path: str, said: str
) -> None:
    monkeypatch.setenv("SCD_DATA_MIRROR", f"{mirror}/{mirror_path}")
    with pytest.raises(InputError, match=said) as err:
        ensure("winogender")
    assert "\n" not in str(err.value)
    left = [p for p in empty.rglob("*") if p.is_file()] if empty.exists() else []
    assert left == []  # no partial file, no temporary one


def test_scd_data_fetches_verifies_and_refuses_in_one_line(
    mirror, empty, shared_data: Path, monkeypatch, capsys
) -> None:
    from scd.cli import main

    monkeypatch.setenv("SCD_DATA_MIRROR", f"{mirror}/missing")
    assert main(["data", "fetch", "winogender"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("scd: error: winogender: ") and err.count("\n") == 1 and "404" in err
    monkeypatch.setenv("SCD_DATA_MIRROR", mirror)
    assert main(["data", "fetch", "winogender"]) == 0
    assert main(["data", "verify", "winogender"]) == 0
    assert capsys.readouterr().out.count(": ok") == 3  # each file of it
    (empty / "winogender" / "templates.tsv").write_text("edited\n")
    assert main(["data", "verify", "all"]) == 2
    assert "winogender/templates.tsv" in capsys.readouterr().err
    assert main(["data", "fetch", "nope"]) == 2
    assert "nope: not a dataset scd declares" in capsys.readouterr().err
    monkeypatch.setenv("SCD_DATA_DIR", str(shared_data))
    assert main(["data", "list"]) == 0
    assert "crows_pairs: 1/1 files" in capsys.readouterr().out


def _scd(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    import os

    return subprocess.run(
        [sys.executable, "-m", "scd", *args],
        cwd=cwd,
        env={**os.environ, "OMP_NUM_THREADS": "1", **env},
        capture_output=True,
        text=True,
        timeout=900,
    )


def _eval_args(name: str, out: Path) -> list[str]:
    limits = {"crows_pairs": ["--limit", "20"], "winobias": ["--limit", "10"], "winogender": []}
    extra = ["--categories", "Age,Religion", "--limit", "20"] if name == "bbq" else limits[name]
    return ["eval", name, "--model", "toy", "--out", str(out), *extra]


@pytest.mark.slow
def test_scd_eval_without_data_fetches_verifies_and_runs(
    mirror, shared_data: Path, toy_model: Path, tmp_path: Path
) -> None:
    key = cache_key(kind="toy_model", bias_axes=["religion", "nationality"], seed=0)
    shutil.copytree(toy_model, tmp_path / "outputs" / "cache" / "toy-model" / key)
    data = tmp_path / "data"
    for name in SERVED:
        done = _scd(
            _eval_args(name, tmp_path / name),
            tmp_path,
            {"SCD_DATA_DIR": str(data), "SCD_DATA_MIRROR": mirror},
        )
        assert "fetched" in done.stderr and all(
            r["status"] == "ok" for r in _verified(name, data) if r["path"] in _served(name)
        )
        assert done.returncode == 0, done.stderr[-2000:]
        run = json.loads((tmp_path / name / "run.json").read_text())
        assert run["dataset"]["name"] == name and run["dataset"]["commit"] == catalog()[name].commit
    # WinoBias' occupations are no words of the toy's prompts: a toy with them as tokens
    toys = [json.loads(p.read_text()) for p in (tmp_path / "outputs").rglob("toy_model.json")]
    assert sorted(len(t.get("words", [])) for t in toys) == [0, 40]
    # the mirror down: one line, exit 2, before any model loads (no toy model is built)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    for name in SERVED:
        done = _scd(
            _eval_args(name, fresh / name),
            fresh,
            {"SCD_DATA_DIR": str(fresh / "data"), "SCD_DATA_MIRROR": "http://127.0.0.1:9"},
        )
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith("scd: error: ") and "SCD_DATA_MIRROR" in done.stderr
    assert not (fresh / "outputs").exists() and not any((fresh / "data").rglob("*.*"))
    # the reference data in SCD_DATA_DIR: no network at all (the mirror's log stays empty)
    _Mirror.requests = []
    done = _scd(
        _eval_args("winogender", tmp_path / "ref"),
        tmp_path,
        {"SCD_DATA_DIR": str(shared_data), "SCD_DATA_MIRROR": mirror},
    )
    assert done.returncode == 0 and _Mirror.requests == [] and "fetched" not in done.stderr


def _served(name: str) -> list[str]:
    return SERVED[name] or catalog()[name].paths()


def _verified(name: str, data: Path) -> list[dict]:
    import os

    before = os.environ.get("SCD_DATA_DIR")
    os.environ["SCD_DATA_DIR"] = str(data)
    try:
        return verify(name)
    finally:
        if before is None:
            os.environ.pop("SCD_DATA_DIR")
        else:
            os.environ["SCD_DATA_DIR"] = before
