"""End to end: `scd quickstart` and `scd run recipes/quickstart.yaml`, killed and resumed.

The planted-bias toy model is the ground truth: Table 10 must show the planted bias before tuning
(a quarter of the toy prompts carry a planted-axis descriptor, ~25%) and a reduction after, on the
held-out prompts. A run killed in the middle of its tuned-model evaluation must resume to the same
tables as an uninterrupted run, reuse the cached base evaluation, and a further run is a no-op.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from wandb_records import finished_records  # tests/wandb_records.py

from scd.cli import main
from scd.errors import InputError
from scd.io import cache_key
from scd.tracking import offline_folders, offline_records

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, toy_model: Path) -> Path:
    """An outputs root whose cache already holds the toy model (its build is tested elsewhere)."""
    root = tmp_path_factory.mktemp("e2e") / "qs"
    key = cache_key(kind="toy_model", bias_axes=["religion", "nationality"], seed=0)
    shutil.copytree(toy_model, root.parent / "cache" / "toy-model" / key)  # outputs/cache
    return root


@pytest.fixture(scope="module")
def quickstart(root: Path) -> str:
    """`scd quickstart --out ROOT` (uninterrupted); returns what it printed."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["quickstart", "--out", str(root)]) == 0
    return printed.getvalue()


def _row(text: str, label: str) -> list[float]:
    line = next(x for x in text.splitlines() if x.startswith(f"| {label} |"))
    cells = line.strip("|").split("|")[1:]  # "25.0 [22.6, 27.6]" (a 95% interval) or "3,456"
    return [float(c.split("[")[0].replace(",", "")) for c in cells]


def test_quickstart_shows_the_planted_bias_and_its_reduction(quickstart: str, root: Path) -> None:
    cells = _row(quickstart, "Setting 1")  # before/after per contact type, then all, then n
    befores, afters = cells[0:8:2], cells[1:8:2]
    assert all(b > 15 for b in befores), befores
    assert all(a <= 0.5 * b for a, b in zip(afters, befores)), (befores, afters)
    assert f"Open {root / 'report.html'}" in quickstart
    for name in ("report.md", "report.html", "tables/table10.csv", "tables/table1.md"):
        assert (root / name).is_file(), name
    for name in ("figure1", "figure2", "figure2_setting1", "loss"):
        assert (root / "figures" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    html = (root / "report.html").read_text()
    assert "Table 10" in html and html.count("data:image/png;base64,") == 4


def test_the_report_says_what_a_reader_needs(quickstart: str, root: Path) -> None:
    report = (root / "report.md").read_text()
    for needle in (
        "| Report built |",
        "| scd |",
        "| Model | `toy`",
        "fingerprint",
        "| Planted bias (toy model) | religion, nationality",
        "| Adapter, setting 1 |",
        "sha256",
        "| Training | LoRA r=8",
        "17,280 prompts in 5,760 sets over 32 descriptors",
        "the base model answered 17,280",
        "## The settings",
        "fine-tuned on mixed examples from all categories",
        "## Contents",
        "- [Training](#training)",
        "| Setting | Steps |",
        "Mean loss (all steps)",
        "## Beyond the paper: baselines and answer tendency",
        "First option",
        "Adapter of step",
        "| 75 (last) |",
        "| Engine | hf, dtype float32, batch 64, device cpu |",
    ):
        assert needle in report, needle
    # each figure has a caption right under it, numbered 1, 2, 3, ... in their order
    names = (
        ("loss", "*Figure 1. Training loss"),
        ("figure1", "*Figure 2. Bias % before"),
        ("figure2", "*Figure 3. The base model's"),
        ("figure2_setting1", "*Figure 4. Bias % by axis"),
    )
    assert "{{number}}" not in report and "Figure 0" not in report and "Figure 2.1" not in report
    assert "grey" not in report  # the toy's heatmaps have a value in every cell
    at = [report.index(f"![{name}](figures/{name}.png)") for name, _ in names]
    for (name, caption), i in zip(names, at):
        assert report[i:].split("\n\n", 2)[1].startswith(caption), name
    assert at == sorted(at) and report.index("## Table 10") < at[1]
    table10 = report.split("## Table 10")[1]
    row = next(x for x in table10.splitlines() if x.startswith("| Setting 1"))
    assert row.count("[") == 8  # every before/after cell with its 95% interval


def _snapshot(run_dir: Path) -> dict[str, float]:
    return {str(p): p.stat().st_mtime_ns for p in run_dir.rglob("*") if p.is_file()}


def test_killed_run_resumes_to_the_same_tables(
    quickstart: str, root: Path, shared_data: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "WANDB_DIR"}
    env.update(WANDB_MODE="offline", WANDB_API_KEY="wb-secret-0123456789abcdef0123456789")
    overrides = [
        "wandb.enabled=true",
        "eval.bbq.enabled=true",
        f"eval.bbq.data={shared_data / 'bbq' / 'data'}",
        "eval.bbq.categories=[Age, Religion]",
        "eval.bbq.limit=40",
        "eval.sds.enabled=true",
        "eval.sds.limit_conditions=2",
        "eval.aq27.enabled=true",
        "eval.aq27.limit_conditions=2",
        "eval.aq27.in_vocabulary=false",  # the toy model's vocabulary has no illness names
    ]
    recipe = str(REPO / "recipes" / "quickstart.yaml")
    cmd = [
        sys.executable,
        "-m",
        "scd",
        "run",
        recipe,
        "--outputs",
        str(root.parent),
        "--run-id",
        "killed",
    ]
    cmd += [arg for item in overrides for arg in ("--set", item)]
    run_dir = root.parent / "killed"
    records = run_dir / "setting-1" / "arm-sft" / "eval" / "bias" / "records.jsonl"
    log = root.parent / "killed.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 900
    while proc.poll() is None and time.monotonic() < deadline:
        if records.is_file() and records.stat().st_size > 0:
            break
        time.sleep(0.02)
    assert proc.poll() is None, f"ended before it could be killed: {log.read_text()[-2000:]}"
    proc.kill()
    proc.wait()
    first = log.read_text()  # the quickstart's cache served the toy model and the base model
    assert "toy model: cached" in first and "base/bias: cached" in first
    assert "setting-1/arm-sft/train: done in" in first
    stages = json.loads((run_dir / "state.json").read_text())["stages"]
    assert "setting-1/arm-sft/train" in stages and "setting-1/arm-sft/eval/bias" not in stages

    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "toy model (planted" not in done.stdout  # cached, not rebuilt
    stages = [x.strip() for x in done.stdout.splitlines()]  # finished here: not even looked at
    assert not any(x.startswith("base/bias") for x in stages)
    assert any(x.startswith("resuming: ") and "stages finished earlier" in x for x in stages)
    assert len(list((root.parent / "cache" / "base").glob("bias-*"))) == 1  # the quickstart's

    resumed = pd.read_csv(run_dir / "tables" / "table10.csv")
    uninterrupted = pd.read_csv(root / "tables" / "table10.csv")
    pd.testing.assert_frame_equal(resumed, uninterrupted)
    lines = records.read_text().splitlines()
    ids = [json.loads(x)["prompt_id"] for x in lines]
    assert (
        len(ids)
        == len(set(ids))
        == len((root / "setting-1/arm-sft/eval/bias/records.jsonl").read_text().splitlines())
    )

    # BBQ (Table 15 + bars), stigma probes and W&B (offline, one group) came along
    table15 = pd.read_csv(run_dir / "tables" / "table15.csv")
    assert {"n", "accuracy_ci_low", "accuracy_ci_high"} <= set(table15.columns)
    assert (run_dir / "figures" / "bbq.png").is_file()
    report = (run_dir / "report.md").read_text()
    assert "Table 15" in report and "## Stigma: P(negative attitude) (sds probe)" in report
    assert "Categories: 2 of BBQ's 11" in report and "*Figure 5. BBQ per category" in report
    assert "; 40 items per model" in report  # the subset BBQ's limit asked for
    for probe in ("sds", "aq27"):
        assert (run_dir / "tables" / f"stigma-{probe}.md").is_file()
        assert len(pd.read_csv(run_dir / "tables" / f"stigma-{probe}.csv")) >= 2
        assert (run_dir / "setting-1" / "arm-sft" / "eval" / probe / "summary.json").is_file()
    offline = list(run_dir.rglob("offline-run-*"))
    assert len(offline) >= 2, offline  # the training run and the report run
    # the training run got the tuned model's results: continued by id after the evaluations
    adapter = run_dir / "setting-1" / "arm-sft" / "adapter"
    run_id = json.loads((adapter / "train_manifest.json").read_text())["wandb_run_id"]
    segments = offline_folders(adapter / "wandb", run_id)
    assert len(segments) == 2, segments
    finished_records(segments[-1])  # W&B's service writes the last records after finish()
    last = (segments[-1] / f"run-{run_id}.wandb").read_bytes()
    assert b"bias/bias_pct" in last and b"sds/gap" in last and b"bbq/s_dis" in last
    # before and after on the same items, with the paired test, beside the headline numbers
    items = [i for r in offline_records(segments[-1]) for i in (*r.summary.update, *r.history.item)]
    keys = {i.key or "/".join(i.nested_key) for i in items}
    for key in (
        "before/bias/bias_pct",
        "after/bias/bias_pct",
        "after/bias/bias_p",
        "before/bbq/bbq_n",
        "after/bbq/bbq_p",
        "flips/bias",
    ):
        assert key in keys, key
    flips = next(json.loads(i.value_json) for i in items if i.key == "flips/bias")
    assert flips["_type"] == "table-file" and flips["nrows"] >= 0  # a table in the summary
    assert not any(r.history.item for r in offline_records(segments[-1]))  # history: training's
    assert "before/bias/bias_p" not in keys and "before/bias/bias_to_biased" not in keys
    # no secret was written anywhere
    for path in run_dir.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".yaml", ".md", ".html", ".csv"):
            assert "wb-secret" not in path.read_text(errors="ignore"), path

    before = _snapshot(run_dir)
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "nothing to do" in again.stdout and "resuming" not in again.stdout
    assert _snapshot(run_dir) == before


def test_changed_recipe_is_refused_with_the_keys_that_differ(root: Path, quickstart: str) -> None:
    err = io.StringIO()
    recipe = str(REPO / "recipes" / "quickstart.yaml")
    args = ["run", recipe, "--outputs", str(root.parent), "--run-id", root.name]
    with contextlib.redirect_stderr(err):
        assert main([*args, "--set", "train.learning_rate=1e-3"]) == 2
    assert "train.learning_rate" in err.getvalue() and err.getvalue().count("\n") == 1


def test_a_finished_run_reads_its_results_where_they_were_cached(
    quickstart: str, root: Path, toy_model: Path, tmp_path: Path
) -> None:
    """Resumed with another cache directory, a finished run still finds (and reports) the base
    evaluation where its first invocation cached it."""
    from scd.pipeline.launch import run_recipe
    from scd.pipeline.recipe import recipe_from_dict
    from scd.quickstart import QUICKSTART_RECIPE

    key = cache_key(kind="toy_model", bias_axes=["religion", "nationality"], seed=0)
    other = tmp_path / "other-cache"
    shutil.copytree(toy_model, other / "toy-model" / key)
    said: list[str] = []
    run_recipe(recipe_from_dict(QUICKSTART_RECIPE), root, other, progress=False, say=said.append)
    assert "nothing to do" in said[-1]
    layout = json.loads((root / "layout.json").read_text())
    assert Path(layout["base"]["bias"]).parent == root.parent / "cache" / "base"
    assert not (other / "base").exists()


def test_a_report_while_the_base_models_evaluation_is_pending(
    quickstart: str, root: Path, tmp_path: Path
) -> None:
    """The tuned model's evaluation finished before the base model's (Ray submits the base task
    last): ``scd report`` shows what it can and names the base model's result as pending."""
    copy = tmp_path / "outputs"
    shutil.copytree(root.parent, copy, ignore=shutil.ignore_patterns("toy-model"))
    layout = (copy / root.name / "layout.json").read_text().replace(str(root.parent), str(copy))
    (copy / root.name / "layout.json").write_text(layout)
    base_bias = Path(json.loads(layout)["base"]["bias"])
    (base_bias / "summary.json").unlink()
    assert main(["report", str(copy / root.name)]) == 0
    report = (copy / root.name / "report.md").read_text()
    assert f"**This run has not finished**: 1 result pending (`{base_bias}`)" in report
    assert "## Training" in report  # the finished training is still shown


def test_a_run_under_the_paper_chat_protocol(toy_model: Path, tmp_path: Path) -> None:
    """scd run with eval.bias.protocol paper-chat: the SFT rows, the training and every bias
    evaluation (base and tuned) use that protocol, so that training trains what is scored."""
    import pyarrow.parquet as pq

    from scd.models.protocols import PAPER_SYSTEM_PROMPT

    key = cache_key(kind="toy_model", bias_axes=["religion", "nationality"], seed=0)
    shutil.copytree(toy_model, tmp_path / "cache" / "toy-model" / key)  # the session's toy model
    sets = [
        *("eval.bias.protocol=paper-chat", "data.max_train=40", "data.max_eval=10"),
        *("train.max_steps=2", "eval.bias.limit=60"),
    ]
    args = ["run", str(REPO / "recipes" / "quickstart.yaml"), "--outputs", str(tmp_path)]
    assert main([*args, "--run-id", "pc", *(x for s in sets for x in ("--set", s))]) == 0
    run = tmp_path / "pc"
    rows = pq.read_table(run / "setting-1" / "sft" / "train.parquet").to_pylist()
    assert all(r["prompt"][0]["content"] == PAPER_SYSTEM_PROMPT for r in rows)
    layout = json.loads((run / "layout.json").read_text())
    for result in (layout["base"]["bias"], layout["settings"]["1"]["evals"]["bias"]):
        assert json.loads((Path(result) / "run.json").read_text())["protocol"] == "paper-chat"
    adapter = Path(layout["settings"]["1"]["adapter"])
    assert json.loads((adapter / "train_manifest.json").read_text())["token_check_rows"] > 0


def test_a_finished_run_pushes_each_adapter_with_its_before_after_card(
    quickstart: str, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """train.push_to_hub on a finished run (the keys are not pinned): only the push stage runs.
    The Hub unreachable: one line naming the stage, the planted token nowhere, the card written
    with the before/after tables, no upload recorded; reachable (a recorder in place of the
    upload: the Hub itself cannot be reached here): the stage finishes, then nothing to do."""
    import scd.hub
    from scd.pipeline.launch import run_recipe
    from scd.pipeline.recipe import recipe_from_dict
    from scd.quickstart import QUICKSTART_RECIPE

    run_dir = root.parent / "pushed"
    shutil.copytree(root, run_dir)
    secret = "hf_plantedTOKENnotForAnyLog456"
    monkeypatch.setenv("HF_TOKEN", secret)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    keys = ["train.push_to_hub=true", "train.hub_model_id=someone/scd-quickstart"]
    recipe = recipe_from_dict(QUICKSTART_RECIPE, "quickstart", overrides=keys)
    said: list[str] = []
    with pytest.raises(InputError) as err:
        run_recipe(recipe, run_dir, root.parent / "cache", progress=False, say=said.append)
    assert "stage setting-1/arm-sft/push" in str(err.value) and "cannot upload to the Hub" in str(
        err.value
    )
    assert secret not in str(err.value) + "".join(said)
    adapter = run_dir / "setting-1" / "arm-sft" / "adapter"
    card = (adapter / "README.md").read_text()
    assert card.startswith("---\n") and "library_name: peft" in card
    assert "# someone/scd-quickstart" in card and "| bias_pct |" in card  # before | after
    assert "Not measured yet" not in card and "```yaml" in card and secret not in card
    assert not (adapter / "hub.json").exists()
    uploads = []
    monkeypatch.setattr(scd.hub, "upload", lambda *a, **kw: uploads.append((a, kw)) or "url")
    said.clear()
    run_recipe(recipe, run_dir, root.parent / "cache", progress=False, say=said.append)
    [((folder, repo), kw)] = uploads
    assert (Path(folder), repo, kw["repo_type"]) == (adapter, "someone/scd-quickstart", "model")
    assert "adapter_*" in kw["allow"] and "README.md" in kw["allow"]
    assert not any("checkpoint" in a or "wandb" in a for a in kw["allow"])
    pushed = json.loads((adapter / "hub.json").read_text())
    assert pushed["repo"] == "someone/scd-quickstart" and "bias" in pushed["evaluated"]
    assert any("setting-1/arm-sft/push" in line for line in said)
    said.clear()
    run_recipe(recipe, run_dir, root.parent / "cache", progress=False, say=said.append)
    assert len(uploads) == 1  # finished: not uploaded again


def _as_an_earlier_scd_wrote_it(made: Path, run: Path) -> None:
    """The finished run ``made`` copied to ``run`` as the scd before one layout for every arm
    wrote it: SCD's arm in ``setting-N`` itself, and every path that names it (the state's
    stage names and outputs, the layout, each result's run.json and summary, the report)."""
    shutil.copytree(made, run)
    for arm in run.glob("setting-*/arm-sft"):
        for entry in arm.iterdir():
            entry.rename(arm.parent / entry.name)
        arm.rmdir()
    for path in run.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".yaml", ".md", ".html"):
            text = path.read_text()
            old = re.sub(r"(setting-\d+)/arm-sft/", r"\1/", text.replace(str(made), str(run)))
            if old != text:
                path.write_text(old)


def _bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_a_run_of_the_earlier_layout_moves_and_resumes(quickstart: str, root: Path) -> None:
    """SCD's arm of an earlier scd's run moves to setting-1/arm-sft when the run is opened: a
    finished run runs nothing again and keeps its tables, its report rebuilt gives the same
    tables; a run stopped in the arm's evaluation resumes it where it stopped (its pinned
    identity names the adapter where it now is) and runs nothing else."""
    from scd.pipeline.launch import run_recipe
    from scd.pipeline.recipe import recipe_from_dict
    from scd.quickstart import QUICKSTART_RECIPE

    recipe = recipe_from_dict(QUICKSTART_RECIPE, "quickstart")
    earlier = root.parent / "earlier"
    _as_an_earlier_scd_wrote_it(root, earlier)
    assert (earlier / "setting-1" / "adapter" / "adapter_model.safetensors").is_file()
    tables, said = _bytes(earlier / "tables"), []
    run_recipe(recipe, earlier, root.parent / "cache", progress=False, say=said.append)
    assert said[0].startswith(f"{earlier}: an earlier scd's layout: moved setting-1/adapter")
    assert said[-1].startswith("all stages finished earlier; nothing to do")
    assert not (earlier / "setting-1" / "adapter").exists()
    assert (earlier / "setting-1" / "arm-sft" / "adapter" / "adapter_model.safetensors").is_file()
    assert _bytes(earlier / "tables") == tables
    stages = json.loads((earlier / "state.json").read_text())["stages"]
    assert list(stages) == list(json.loads((root / "state.json").read_text())["stages"])
    layout = json.loads((earlier / "layout.json").read_text())["settings"]
    made = (root / "layout.json").read_text().replace(str(root), str(earlier))
    assert layout == json.loads(made)["settings"]  # SCD's adapter, evaluations: arm-sft's
    assert main(["report", str(earlier)]) == 0
    assert _bytes(earlier / "tables") == _bytes(root / "tables")

    cut = root.parent / "earlier-cut"
    _as_an_earlier_scd_wrote_it(root, cut)
    bias = cut / "setting-1" / "eval" / "bias"
    records = (bias / "records.jsonl").read_text().splitlines(keepends=True)
    (bias / "records.jsonl").write_text("".join(records[: len(records) // 2]))
    (bias / "summary.json").unlink()
    state = json.loads((cut / "state.json").read_text())
    del state["stages"]["setting-1/eval/bias"]
    (cut / "state.json").write_text(json.dumps(state))
    said.clear()
    run_recipe(recipe, cut, root.parent / "cache", progress=False, say=said.append)
    ran = [x.strip() for x in said if x.endswith(" ...")]
    assert ran == ["setting-1/arm-sft/eval/bias ...", "report ..."], said
    resumed = (cut / "setting-1" / "arm-sft" / "eval" / "bias" / "records.jsonl").read_text()
    assert resumed.splitlines(keepends=True)[: len(records) // 2] == records[: len(records) // 2]
    assert len(resumed.splitlines()) == len(records)
    for name in ("table10", "table1"):
        assert (cut / "tables" / f"{name}.csv").read_bytes() == (
            root / "tables" / f"{name}.csv"
        ).read_bytes()
