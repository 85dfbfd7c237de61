"""The arena end to end on the planted-bias toy model: `scd run recipes/arena-quickstart.yaml`
(every arm: base, prompt, general, sft, dpo, kto; BBQ and the SDS probe on top), the table and
report it writes, a run killed in the middle of an arm's training resumed to the same table, and
the recipe mistakes that must fail before any work.

The toy model's planted bias (25% of its prompts carry a planted-axis descriptor) is the ground
truth: SCD's, DPO's and KTO's adapters must take it below 5% (their intervals too), while the
system prompt and the control trained on general instructions only must leave it above 15%.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from scd.cli import main
from scd.io import cache_key

REPO = Path(__file__).resolve().parents[2]
RECIPE = str(REPO / "recipes" / "arena-quickstart.yaml")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory, toy_model: Path) -> Path:
    """An outputs root whose cache already holds the toy model."""
    root = tmp_path_factory.mktemp("arena")
    key = cache_key(kind="toy_model", bias_axes=["religion", "nationality"], seed=0)
    shutil.copytree(toy_model, root / "cache" / "toy-model" / key)
    return root


@pytest.fixture(scope="module")
def bbq_overrides(shared_data: Path) -> list[str]:
    items = [
        f"eval.bbq.data={shared_data / 'bbq' / 'data'}",
        "eval.bbq.enabled=true",
        "eval.bbq.categories=[Age, Religion]",
        "eval.bbq.limit=40",
    ]
    return [arg for item in items for arg in ("--set", item)]


def _command(outputs: Path, run_id: str, overrides: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "scd",
        "run",
        RECIPE,
        "--outputs",
        str(outputs),
        "--run-id",
        run_id,
        *overrides,
    ]


@pytest.fixture(scope="module")
def arena(outputs: Path, bbq_overrides: list[str]) -> tuple[Path, str]:
    """The arena quickstart, uninterrupted: its run directory and what it printed."""
    done = subprocess.run(
        _command(outputs, "arena", bbq_overrides), capture_output=True, text=True, timeout=1200
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return outputs / "arena", done.stdout


def test_every_arm_is_a_row_with_bias_cost_and_test(arena: tuple[Path, str]) -> None:
    run, _ = arena
    table = pd.read_csv(run / "tables" / "arena.csv").set_index("arm")
    assert list(table.index) == ["base", "prompt", "general", "sft", "dpo", "kto"]
    assert {"bias_pct", "kl_mean", "bias_p", "bias_p_holm", "descriptor_effect_pts"} <= set(
        table.columns
    )
    bias = table["bias_pct"]
    assert 20 < bias["base"] < 30  # the planted 25%
    # every trained arm's whole interval below 5% (two epochs and arena.beta 0.5: see the recipe;
    # one epoch left DPO and KTO anywhere from 0.5% to 10.5% across CPUs and seeds)
    trained = table.loc[["sft", "dpo", "kto"], "bias_ci_high"]
    assert (trained < 5).all(), table["bias_ci_high"]
    assert bias["prompt"] > 15 and bias["general"] > 15, bias
    # the same held-out prompts for every arm, paired against the base model
    assert table["bias_n"].nunique() == 1 and table["bbq_n"].nunique() == 1
    assert table.loc["base", "bias_p"] == 1.0
    assert table.loc["base", ["bias_to_unbiased", "bias_to_biased"]].tolist() == [0, 0]
    for arm in ("sft", "dpo"):
        assert table.loc[arm, "bias_p_holm"] < 0.01  # a cluster bootstrap: at least 1/2001
        assert table.loc[arm, "bias_p_holm"] >= table.loc[arm, "bias_p"]
    # capability: the base model exactly 0, every trained arm moved
    assert table.loc["base", "kl_mean"] == 0.0
    assert (table.loc[["general", "sft", "dpo", "kto"], "kl_mean"] > 0).all()
    # the descriptor effect: what depends on the group named; the planted bias is all of it
    assert table.loc["base", "descriptor_effect_pts"] > 20
    assert table.loc["sft", "descriptor_effect_pts"] < 5
    for column in ("bbq_accuracy", "bbq_s_dis", "sds_gap", "tendency_certainty_yes_pct"):
        assert table[column].notna().all(), column


def test_the_report_and_the_end_of_the_run_show_the_arena(arena: tuple[Path, str]) -> None:
    run, printed = arena
    assert "| Setting | Arm | Bias % [95% CI] | p vs base (Holm) |" in printed
    assert printed.index("| 1 | dpo |") < printed.rindex("done in")
    report = (run / "report.md").read_text()
    assert "## Arena" in report and "- [Arena](#arena)" in report
    assert (run / "figures" / "arena.png").read_bytes()[:4] == b"\x89PNG"
    assert "| Adapter, setting 1, arm dpo |" in report  # every trained arm's adapter, hashed
    layout = json.loads((run / "layout.json").read_text())
    assert [a["arm"] for a in layout["arms"]] == ["base", "prompt", "general", "sft", "dpo", "kto"]
    for arm in layout["arms"][1:]:  # every arm of the setting on the same held-out prompts
        assert Path(arm["evals"]["bias"]).name == "bias"
    manifest = json.loads(
        (run / "setting-1" / "arm-dpo" / "adapter" / "train_manifest.json").read_text()
    )
    assert manifest["method"] == "dpo" and manifest["token_check_rows"] > 0
    general = json.loads((run / "setting-1" / "arm-general" / "data" / "manifest.json").read_text())
    sft = pd.read_parquet(run / "setting-1" / "sft" / "train.parquet")
    assert general["counts"]["train"] == len(sft)  # same rows, so the same steps
    steps = [
        json.loads((run / p / "adapter" / "train_manifest.json").read_text())["global_step"]
        for p in ("setting-1/arm-sft", "setting-1/arm-general", "setting-1/arm-dpo")
    ]
    assert len(set(steps)) == 1, steps


def test_a_contrast_arm_joins_a_finished_run_with_its_twins_and_the_judgment_columns(
    outputs: Path,
) -> None:
    """arms: [base, sft] with the relevance controls, then the same recipe with sft-contrast
    added: only the new arm runs, its rows hold the twins, and the arena shows every arm's
    judgment columns, the gate and a verdict (the toy model reads no cue: no gate to pass)."""
    common = ["--set", "eval.sds.enabled=false", "--set", "eval.judgment.enabled=true"]
    common += ["--set", "eval.judgment.scales=[certainty]"]
    first = _command(outputs, "contrast", [*common, "--set", "arms=[base,sft]"])
    done = subprocess.run(first, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    before = pd.read_csv(outputs / "contrast" / "tables" / "arena.csv").set_index("arm")
    more = _command(outputs, "contrast", [*common, "--set", "arms=[base,sft,sft-contrast]"])
    done = subprocess.run(more, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "setting-1/arm-sft/train ..." not in done.stdout  # sft's training is not run again
    assert "setting-1/arm-sft-contrast/train ..." in done.stdout
    run = outputs / "contrast"
    table = pd.read_csv(run / "tables" / "arena.csv").set_index("arm")
    assert list(table.index) == ["base", "sft", "sft-contrast"]
    assert table.loc["sft", "bias_pct"] == before.loc["sft", "bias_pct"]
    assert table["judgment_pct"].notna().all() and table["judgment_gate"].isna().all()
    manifest = json.loads(
        (run / "setting-1" / "arm-sft-contrast" / "data" / "manifest.json").read_text()
    )
    sft = pd.read_parquet(run / "setting-1" / "sft" / "train.parquet")
    assert manifest["twins"]["rows"] == round(0.25 / 0.75 * len(sft))
    assert manifest["counts"]["train"] == len(sft) + manifest["twins"]["rows"]
    report = (run / "report.md").read_text()
    assert "| Judgment gate |" in report and "Verdicts: an arm is debiased" in report
    assert "- sft-contrast, setting 1: bias fell" in report
    assert "the base model reads the cue on no action" in report


def test_a_run_killed_in_an_arms_training_resumes_to_the_same_table(
    arena: tuple[Path, str], outputs: Path, bbq_overrides: list[str]
) -> None:
    cmd = _command(outputs, "killed", bbq_overrides)
    run = outputs / "killed"
    checkpoint = run / "setting-1" / "arm-dpo" / "adapter" / "checkpoints" / "checkpoint-20"
    log = outputs / "killed.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=os.environ.copy())
    deadline = time.monotonic() + 900
    while proc.poll() is None and time.monotonic() < deadline:
        if (checkpoint / "trainer_state.json").is_file():
            break
        time.sleep(0.05)
    assert proc.poll() is None, f"ended before it could be killed: {log.read_text()[-2000:]}"
    proc.kill()
    proc.wait()
    stages = json.loads((run / "state.json").read_text())["stages"]
    assert "setting-1/arm-dpo/train" not in stages and "setting-1/arm-sft/train" in stages
    uninterrupted = pd.read_csv(arena[0] / "tables" / "arena.csv").set_index("arm")

    # the killed run's report: the finished results (the base model's evaluations, from the
    # cache; the capability cost of each arm trained before the kill), the rest said pending
    assert main(["report", str(run)]) == 0
    report = (run / "report.md").read_text()
    assert "**This run has not finished**" in report and "arm-dpo/eval/bias`" in report
    partial = pd.read_csv(run / "tables" / "arena.csv").set_index("arm")
    assert list(partial.index) == ["base", "prompt", "general", "sft"]  # dpo, kto: nothing yet
    assert partial.loc["sft", "kl_mean"] == uninterrupted.loc["sft", "kl_mean"]
    # no arm's held-out evaluation has finished: the arena cannot pair the base model's yet
    assert "bias_pct" not in partial.columns
    assert "Not finished yet (the run has not ended): results of bbq, bias, sds;" in report

    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming training from" in done.stderr + done.stdout
    assert "setting-1/arm-sft/train ..." not in done.stdout  # finished before the kill: not redone
    resumed = pd.read_csv(run / "tables" / "arena.csv")
    uninterrupted = pd.read_csv(arena[0] / "tables" / "arena.csv")
    pd.testing.assert_frame_equal(resumed, uninterrupted)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("arms=[base, sft, ppo]", "arms[2]: unknown arm 'ppo' (expected one of base, prompt,"),
        ("arms=[base, sft, sft]", "arms: each arm once"),
        ("data.general=null", "data.general: the general arm trains on general instruction"),
        ("data.general=./nowhere.jsonl", "data.general: ./nowhere.jsonl: no such file"),
        ("train.per_device_train_batch_size=1", "KTO needs at least 2"),
        ("arena.seeds=[0, 1, 1]", "arena.seeds: expected distinct integer seeds, each once"),
        ("arena.seeds=[0, one]", "arena.seeds: expected an integer, got 'one'"),
        ("arena.seeds=[]", "arena.seeds: expected distinct integer seeds"),
        ("data.descriptors=holistc_bias", "data.descriptors holistc_bias: expected holistic_bias"),
        ("data.general=scd:genral", "data.general scd:genral: not one of scd's own sets"),
        ("capability.lm_eval_tasks=[no_such_task]", "not a task lm-evaluation-harness knows"),
    ],
)
def test_bad_arms_are_one_line_before_any_work(
    override: str,
    message: str,
    tmp_path: Path,
) -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["run", RECIPE, "--outputs", str(tmp_path), "--set", override])
    assert code == 2
    assert message in err.getvalue() and err.getvalue().count("\n") == 1, err.getvalue()
    assert not any(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize(
    ("key", "sets"),
    [
        ("data.general", ["data.general=someone/no-such-dataset"]),
        ("eval.bbq.data", ["eval.bbq.enabled=true", "eval.bbq.data=someone/bbq"]),
    ],
)
def test_a_hub_dataset_is_asked_for_before_any_work(key, sets, tmp_path, monkeypatch) -> None:
    """A Hub dataset id (data.general, eval.bbq.data) is asked for when the plan is made, not
    when its stage loads it: here the Hub cannot be reached (HF_HUB_OFFLINE unset, and the call
    fails as without a network: a fault injected, so that a machine with one tests the same), so
    the run stops in one line naming the key, with nothing written (offline, the datasets cache
    answers instead: nothing to ask)."""
    from huggingface_hub import HfApi, constants

    def unreachable(*args, **kwargs):
        raise ConnectionError("Name or service not known")

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(HfApi, "repo_info", unreachable)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        args = ["run", RECIPE, "--outputs", str(tmp_path)]
        code = main([*args, *(x for s in sets for x in ("--set", s))])
    said = err.getvalue()
    assert code == 2 and key in said and "the Hub cannot be reached" in said, said
    assert said.count("\n") == 1 and not any(tmp_path.iterdir())


def test_a_bad_neutral_prompt_file_is_one_line_before_any_work(tmp_path: Path) -> None:
    """The KL's neutral prompts are read whole when the plan is made, not first after the
    arms have trained."""
    bad = tmp_path / "neutral.yaml"
    bad.write_text("source: mine\nitems: []\n")
    outputs = tmp_path / "outputs"
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(
            ["run", RECIPE, "--outputs", str(outputs), "--set", f"capability.neutral_prompts={bad}"]
        )
    said = err.getvalue()
    assert code == 2 and "items: expected a non-empty list" in said and said.count("\n") == 1
    assert not outputs.exists() or not any(outputs.iterdir())


def test_seeds_train_every_trained_arm_once_per_seed(outputs: Path, shared_data: Path) -> None:
    """``arena.seeds``: each seed of each trained arm is a row of arena.csv, trained with its
    own seed on the same rows and items; the table shows the mean and range over seeds, and
    building it again gives the same bytes. With CrowS-Pairs, Winogender and the relevance
    controls on (WinoBias's words are not in the toy's vocabulary): every arm has their
    columns, measured on the same items, and the report their sections."""
    from scd.report.build import build_report

    overrides = ["--set", "arms=[base, prompt, sft]", "--set", "arena.seeds=[0, 1, 2]"]
    overrides += ["--set", "eval.sds.enabled=false", "--set", "eval.judgment.enabled=true"]
    for name in ("crows_pairs", "winogender"):
        overrides += ["--set", f"eval.{name}.enabled=true"]
        overrides += ["--set", f"eval.{name}.data={shared_data / name}"]
    overrides += ["--set", "eval.crows_pairs.limit=40"]
    done = subprocess.run(
        _command(outputs, "seeds", overrides), capture_output=True, text=True, timeout=1200
    )
    assert done.returncode == 0, done.stderr[-3000:]
    run = outputs / "seeds"
    rows = json.loads((run / "tables" / "arena.json").read_text())
    assert [(r["arm"], r.get("seed")) for r in rows] == [
        ("base", None),
        ("prompt", None),
        ("sft", 0),
        ("sft", 1),
        ("sft", 2),
    ]
    manifests = [
        json.loads((run / f"setting-1/arm-sft/seed-{s}/adapter/train_manifest.json").read_text())
        for s in (0, 1, 2)
    ]
    recipes = [
        yaml.safe_load((run / f"setting-1/arm-sft/seed-{s}/adapter/recipe.yaml").read_text())
        for s in (0, 1, 2)
    ]
    assert [r["train"]["seed"] for r in recipes] == [0, 1, 2]
    assert len({m["train_loss"] for m in manifests}) == 3  # three trainings, not one
    table = (run / "tables" / "arena.md").read_text()
    sft = next(line for line in table.splitlines() if line.startswith("| 1 | sft |"))
    bias = [r["bias_pct"] for r in rows if r["arm"] == "sft"]
    mean = f"{sum(bias) / 3:.1f} ({min(bias):.1f}–{max(bias):.1f})"
    assert mean in sft and sft.rstrip(" |").endswith("| 3")  # the seeds column
    assert "- **Seeds**:" in table
    for column in ("crows_pairs_pct", "winogender_acc", "judgment_pct"):
        assert all(r[column] is not None for r in rows), column
    for n in ("crows_pairs_n", "judgment_n"):
        assert len({r[n] for r in rows}) == 1 and rows[0][n] > 0, n  # the same items
    base = rows[0]  # against itself, paired: no change
    assert base["judgment_change_pts"] == 0 and base["crows_pairs_p"] == base["winogender_p"] == 1
    report = (run / "report.md").read_text()
    for section in ("## CrowS-Pairs", "## Winogender", "## Judgment kept (relevance controls)"):
        assert section in report, section
    for seed in (0, 1, 2):  # every seed's adapter, each arm's own
        assert f"| Adapter, setting 1, arm sft, seed {seed} | `" in report
    assert "seeds 0, 1, 2 (each trained arm once per seed)" in report
    build_report(run)
    assert (run / "tables" / "arena.md").read_text() == table


def test_a_bad_data_file_is_one_line_and_leaves_nothing_behind(tmp_path: Path) -> None:
    """An empty general-data file, one with other columns, and a prompt set that cannot be read
    (found only once the run has pinned its recipe): each one line, exit 2; the run directory
    holds no recipe.json afterwards, so the corrected recipe runs there."""
    from scd.pipeline.recipe import load_recipe
    from scd.pipeline.state import RunState

    empty, columns = tmp_path / "empty.jsonl", tmp_path / "columns.jsonl"
    empty.write_text("")
    columns.write_text('{"question": "x"}\n')
    broken = tmp_path / "prompts"
    broken.mkdir()
    (broken / "prompts.parquet").write_text("not parquet")
    runs = tmp_path / "runs"
    for override, message in (
        (f"data.general={empty}", "an empty file"),
        (f"data.general={columns}", "missing columns"),
        (f"data.prompts={broken}", "prompts.parquet"),
    ):
        extra = ["--set", "data.descriptors=null"] if "prompts" in override else []
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = main(
                ["run", RECIPE, "--outputs", str(runs), "--run-id", "r", "--set", override, *extra]
            )
        assert code == 2 and message in err.getvalue(), err.getvalue()
        assert err.getvalue().count("\n") == 1, err.getvalue()
        assert not (runs / "r" / "recipe.json").exists()  # nothing that blocks the rerun
    fixed = load_recipe(RECIPE)
    assert RunState(runs / "r", fixed.to_dict()).hold_recipe()  # the corrected recipe is held there
