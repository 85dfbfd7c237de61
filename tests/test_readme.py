"""The documentation's commands, each run on its own from a fresh clone: every block marked
``<!-- readme: run -->`` in the README and the pages of docs/ (offline: the toy model, small N,
SmolLM2 from PyPI). What they write must be ignored by git."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def runnable_blocks(text: str) -> list[str]:
    """The bash blocks that follow a ``<!-- readme: run -->`` line, in order."""
    return re.findall(r"<!-- readme: run -->\n```bash\n(.*?)\n```", text, flags=re.S)


def _fresh_clone(where: Path) -> Path:
    """The files a clone would hold (tracked, plus new files not ignored), as a git repository."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    for name in filter(None, files):
        source, target = REPO / name, where / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():  # e.g. recipes/ -> src/scd/recipes/, as git clones it
            target.symlink_to(os.readlink(source))
        elif source.is_file():
            shutil.copy2(source, target)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q"], cwd=where, check=True)
    subprocess.run([*git, "add", "-A"], cwd=where, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "clone"], cwd=where, check=True)
    return where


PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
# (page, block): each runnable block once, the README's first
BLOCKS = list(
    {b: p.relative_to(REPO) for p in PAGES for b in runnable_blocks(p.read_text())}.items()
)


def test_the_marked_blocks_are_the_offline_ones():
    blocks = [block for block, _ in BLOCKS]
    assert len(blocks) >= 9 and blocks[0].startswith("pip install -e . && scd quickstart")
    assert not any("meta-llama" in b or "--backend vllm" in b for b in blocks)
    guides = {page.name for _, page in BLOCKS}
    assert {"generate.md", "evaluate.md", "bbq.md", "train.md", "run.md"} <= guides


# what a block must leave beyond its --out paths, by a command it holds
LEAVES = {
    "scd quickstart": "outputs/quickstart/report.html",
    "scd run recipes/quickstart.yaml": "outputs/quickstart/tables/table10.csv",
    "scd report bbq": "outputs/table15.md",
    "scd merge": "outputs/merged/quickstart/model.safetensors",
    "outputs/eval/smollm2-60": "outputs/eval/smollm2-60/summary.json",
    "outputs/sds/toy-scd": "outputs/sds/toy-scd/summary.json",
}


def test_each_expected_output_belongs_to_a_block():
    assert all(any(command in b for b, _ in BLOCKS) for command in LEAVES)


@pytest.mark.parametrize("index", range(len(BLOCKS)), ids=lambda i: f"{BLOCKS[i][1]}:{i + 1}")
def test_each_documented_block_runs_on_its_own_from_a_fresh_clone(
    index: int, tmp_path: Path, smollm2, shared_data
) -> None:
    """A block makes what it uses: run alone in a clone of its own, it succeeds, writes every
    ``--out`` it names, and leaves nothing git does not ignore."""
    block = BLOCKS[index][0]
    clone = _fresh_clone(tmp_path / "scd")
    (tmp_path / "shared").symlink_to(shared_data.parent)  # ../shared beside the clone
    data = Path(smollm2.cache)  # holds SmolLM2's GGUF and its conversion; HolisticBias beside
    if not (data / "holistic_bias").exists():
        (data / "holistic_bias").symlink_to(shared_data / "holistic_bias")
    env = {
        **os.environ,
        "SCD_DATA_DIR": str(data),
        "HF_HUB_OFFLINE": "1",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    script = re.sub(r"^pip install [^&\n]*&& ", "", block, flags=re.M)  # installed already
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
    )
    said = [x for x in done.stderr.replace("\r", "\n").splitlines() if "/s]" not in x]
    assert done.returncode == 0, f"{block}\n--- stderr ---\n" + "\n".join(said[-30:])
    for out in re.findall(r"--out[ =](\S+)", re.sub(r"#.*", "", block)):
        assert (clone / out).is_file() or any((clone / out).iterdir()), out  # not left empty
    for path in (path for command, path in LEAVES.items() if command in block):
        assert (clone / path).is_file(), path
    untracked = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=clone,
        capture_output=True,
        text=True,
    ).stdout
    assert untracked == "", f"documented commands wrote files git does not ignore:\n{untracked}"
