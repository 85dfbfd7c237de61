"""What the command line checks and says (#76): a --out that cannot be written is refused before
any model loads, an unknown command, benchmark or recipe file is named with the nearest one, and
`scd train` prints a token rate only where tokens were counted."""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import pytest

from scd.cli import main
from scd.errors import InputError

REPO = Path(__file__).resolve().parents[1]


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


# -- --out -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def prompts(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("prompts") / "p"
    assert main(["generate", "contact", "--descriptors", "toy", "--out", str(out)]) == 0
    return out


@pytest.fixture
def loads(monkeypatch) -> list[str]:
    """Each model an evaluation starts to load (the load itself is refused: none is needed)."""
    loaded = []

    def load(self, progress):
        loaded.append(self.model)
        raise InputError("the model would load here")

    monkeypatch.setattr("scd.eval.tasks.CausalModel.load", load)
    return loaded


def _eval(prompts: Path, out: Path) -> list[str]:
    return ["eval", "bias", "--model", "m", "--prompts", str(prompts), "--out", str(out)]


def test_an_out_under_a_file_is_refused_before_the_model_loads(prompts, loads, tmp_path):
    file = tmp_path / "file"
    file.write_text("x")
    code, _, err = _run(_eval(prompts, file / "out"))
    assert code == 2 and not loads
    assert (
        err
        == f"scd: error: --out {file}/out: cannot write there ({file} is a file, not a directory)\n"
    )
    code, _, err = _run(_eval(prompts, file / "a" / "b"))  # the nearest existing path is named
    assert code == 2 and not loads and f"({file} is a file" in err
    code, _, err = _run(_eval(prompts, file))
    assert (code, err) == (2, f"scd: error: --out {file}: exists and is not a directory\n")
    assert not loads and file.read_text() == "x" and sorted(tmp_path.iterdir()) == [file]
    with pytest.raises(InputError, match="is a file, not a directory"):  # scd run's way in
        from scd.eval.benchmarks import get

        get("bias").evaluate("m", file / "out", prompts=prompts, progress=False)
    assert not loads


def test_a_read_only_out_is_refused_before_the_model_loads(prompts, loads, tmp_path, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        if os.access(locked, os.W_OK):  # root writes into it anyway: say it may not
            real = os.access

            def access(path, mode):
                return Path(path) != locked and real(path, mode)

            monkeypatch.setattr("scd.eval.tasks.os.access", access)
        for out in (locked / "out", locked / "a" / "b", locked):
            code, _, err = _run(_eval(prompts, out))
            assert code == 2 and not loads
            assert (
                err == f"scd: error: --out {out}: cannot write there ({locked} is not writable)\n"
            )
        assert not any(locked.iterdir())
    finally:
        locked.chmod(0o755)


def test_a_missing_out_and_its_parents_are_still_accepted(prompts, loads, tmp_path):
    out = tmp_path / "new" / "a" / "out"
    code, _, err = _run(_eval(prompts, out))
    assert loads == ["m"] and "the model would load here" in err  # the check let it through
    assert not (tmp_path / "new").exists()  # and made nothing: made when results are written


@pytest.mark.parametrize(
    "command",
    [
        ["merge", "--adapter", "a"],  # loads the base model before writing
        ["toy-model"],  # trains before writing
        ["export", "lm-eval"],
        ["generate", "stigma"],
        ["quickstart"],
        ["report", "bias", "--runs", "a=b"],
        ["eval", "stigma", "--probe", "sds", "--model", "m", "--prompts", "p"],
    ],
    ids=lambda c: " ".join(c[:2]),
)
def test_every_command_with_out_refuses_one_under_a_file_first(command, tmp_path):
    file = tmp_path / "file"
    file.write_text("x")
    for out in (file / "out", file / "t.md"):
        code, stdout, err = _run([*command, "--out", str(out)])
        assert (code, stdout) == (2, "")
        assert (
            err
            == f"scd: error: --out {out}: cannot write there ({file} is a file, not a directory)\n"
        )


def test_a_report_table_goes_to_a_new_directory_or_over_its_file(monkeypatch, tmp_path):
    from scd.eval.benchmarks.tables import Table

    class Stub:
        def table(self, runs):
            return Table("| run |\n|---|\n| a |\n", [{"run": "a"}], "stub")

    monkeypatch.setattr("scd.eval.benchmarks.get", lambda name: Stub())
    out = tmp_path / "new" / "dir" / "t.md"  # a missing parent is made, as for every --out
    for _ in range(2):  # an earlier table file is replaced
        code, stdout, err = _run(["report", "bias", "--runs", f"a={tmp_path}", "--out", str(out)])
        assert (code, err) == (0, ""), err
        assert out.read_text().endswith("| a |\n") and out.with_suffix(".json").is_file()


# -- did you mean --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["evl"], "scd: error: argument COMMAND: invalid choice: 'evl' -- did you mean 'eval'? "),
        (["eval", "crowspairs"], "invalid choice: 'crowspairs' -- did you mean 'crows_pairs'? "),
        (["eval", "BBQ"], "invalid choice: 'BBQ' -- did you mean 'bbq'? (choose from 'bias', "),
        (["eval", "bias", "--backend", "vlm"], "'vlm' -- did you mean 'vllm'? (choose from 'hf',"),
        (["eval", "zzz"], "invalid choice: 'zzz' (choose from 'bias', "),  # nothing close
    ],
)
def test_an_unknown_command_or_benchmark_names_the_nearest(argv, expected):
    code, _, err = _run(argv)
    assert code == 2 and expected in err and err.count("\n") == 1, err
    assert ("did you mean" in err) == ("did you mean" in expected)


def test_a_recipe_not_found_names_the_nearest_file_beside_it(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    for command in ("run", "train"):
        code, _, err = _run([command, "recipes/quickstrat.yaml"])
        assert (code, err) == (
            2,
            "scd: error: recipes/quickstrat.yaml: recipe not found "
            "(did you mean recipes/quickstart.yaml?)\n",
        )
    (tmp_path / "notes.txt").write_text("")  # not a recipe: never suggested
    (tmp_path / "setting1.yaml").write_text("")
    for name, expected in (("setting1.yml", "setting1.yaml"), ("notes.yaml", None)):
        code, _, err = _run(["run", str(tmp_path / name)])
        hint = f" (did you mean {tmp_path / expected}?)" if expected else ""
        assert (code, err) == (2, f"scd: error: {tmp_path / name}: recipe not found{hint}\n")
    code, _, err = _run(["run", str(tmp_path / "gone" / "r.yaml")])  # no such directory
    assert err == f"scd: error: {tmp_path / 'gone' / 'r.yaml'}: recipe not found\n"


# -- scd train's last line -----------------------------------------------------------------------
@pytest.mark.parametrize(("rate", "shown"), [(None, ""), (1234.5, ", 1234.5 tokens/s")])
def test_train_prints_a_token_rate_only_where_one_was_counted(rate, shown, monkeypatch, tmp_path):
    info = {"global_step": 3, "train_loss": 0.5, "tokens_per_second": rate}  # None: DPO, KTO
    monkeypatch.setattr("scd.train.trainer.train", lambda recipe, **kwargs: info)
    monkeypatch.setattr("scd.models.toy.ensure_toy_model", lambda *a, **k: tmp_path / "toy")
    recipe = REPO / "recipes" / "quickstart.yaml"
    code, out, err = _run(["train", str(recipe), "--outputs", str(tmp_path), "--no-wandb"])
    assert code == 0, err
    adapter = tmp_path / "train" / "quickstart"
    assert out.splitlines()[-1] == f"trained 3 steps, loss 0.5000{shown} -> {adapter}"
