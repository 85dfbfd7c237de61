"""Every repository path that a user-facing file names exists: the README, the documents, the
recipes. A file moved or renamed without its mentions fails here rather than in a reader's shell."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NAMED = re.compile(
    r"(?<![\w./-])((?:src|recipes|benchmarks|tests|configs|validation|docs|\.ci)/[\w.*/{}-]*[\w*])"
)
FILES = sorted(
    [
        *REPO.glob("*.md"),
        *(REPO / "docs").rglob("*.md"),
        *(REPO / "recipes").rglob("*.yaml"),
        *(REPO / "recipes").rglob("*.md"),
    ]
)


def named_paths(text: str) -> set[str]:
    return set(NAMED.findall(text))


def test_the_pattern_finds_paths_and_leaves_urls() -> None:
    text = "see src/scd/cli.py, `recipes/quickstart.yaml`; https://x.org/src/a.py and outputs/x"
    assert named_paths(text) == {"src/scd/cli.py", "recipes/quickstart.yaml"}


@pytest.mark.parametrize("doc", FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_path_a_user_file_names_exists(doc: Path) -> None:
    missing = [
        p
        for p in sorted(named_paths(doc.read_text()))
        if not any(REPO.glob(p)) and not (REPO / p).exists()
    ]
    assert missing == [], f"{doc.relative_to(REPO)} names paths that do not exist"


MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:home|root|tmp|work|Users)/[\w.-]+")


def test_no_kept_result_names_the_machine_it_ran_on() -> None:
    """validation/ holds what real-model runs wrote; a path of the machine they ran on (its home,
    /tmp, a work directory) tells a reader nothing and names where it ran: the user's cache is
    written ~/.cache/scd, the package's files src/scd/..., a run's directories outputs/..."""
    found = {
        str(path.relative_to(REPO)): MACHINE_PATH.search(text).group()
        for path in sorted((REPO / "validation").rglob("*"))
        if path.is_file()
        and path.suffix in {".json", ".jsonl", ".md", ".yaml", ".csv", ".txt"}
        and MACHINE_PATH.search(text := path.read_text(errors="replace"))
    }
    assert found == {}
