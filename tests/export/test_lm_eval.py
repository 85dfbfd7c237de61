"""``scd export lm-eval``: the task directory holds scd's work list, its scoring agrees with scd's
own, and lm-evaluation-harness itself, run on the toy model, finds scd's numbers."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from scd.cli import main
from scd.data_gen.contact import user_text
from scd.eval.benchmarks.bias.task import load_work
from scd.export import lm_eval_task as utils
from scd.export.lm_eval import export_lm_eval

LIMIT = 300


class _Loader(yaml.SafeLoader):
    """Reads lm-eval's ``!function`` tags as plain strings."""


_Loader.add_constructor("!function", lambda loader, node: f"!function {node.value}")


def _yaml(path: Path) -> dict:
    return yaml.load(path.read_text(), Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)


@pytest.fixture(scope="module")
def small_stigma(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from scd.data_gen.stigma_probes import generate_stigma

    out = tmp_path_factory.mktemp("stigma") / "probes"
    generate_stigma(out, limit_conditions=3)
    return out


def test_the_export_holds_scds_work_list_as_tasks_and_groups(toy_prompts, small_stigma, tmp_path):
    out = tmp_path / "task"
    info = export_lm_eval(out, prompts=toy_prompts, stigma=small_stigma, limit=LIMIT, seed=3)
    work = load_work(toy_prompts, LIMIT, 3)
    docs = {}
    for name in info["tasks"]:
        docs[name] = [json.loads(line) for line in (out / f"{name}.jsonl").open()]
        task = _yaml(out / f"{name}.yaml")
        assert task["task"] == name and task["dataset_kwargs"] == {"file": f"{name}.jsonl"}
        assert task["output_type"] == "multiple_choice" and task["doc_to_text"] == "text"
    contact = [d for n, rows in docs.items() if n.startswith("scd_contact") for d in rows]
    assert [d["prompt_id"] for d in contact] != []
    assert sorted(d["prompt_id"] for d in contact) == sorted(r["prompt_id"] for r in work)
    by_id = {r["prompt_id"]: r for r in work}
    for d in contact:
        row = by_id[d["prompt_id"]]
        assert d["text"] == user_text(row) and d["options"] == list(row["options"])
        assert d["options"][d["target"]] == row["unbiased_answer"]
        suffix = "_baseline" if row["baseline"] else ""
        assert d in docs[f"scd_contact_{row['scale']}{suffix}"]
    assert sum(not d["baseline"] for d in contact) == sum(not r["baseline"] for r in work)
    group = _yaml(out / "scd_contact.yaml")
    assert sorted(group["task"]) == sorted(
        f"scd_contact_{s}" for s in ("certainty", "frequency", "likelihood")
    )
    assert [m["metric"] for m in group["aggregate_metric_list"]] == [
        "bias",
        "bias_none",
        "bias_positive",
        "bias_negative",
    ]
    assert _yaml(out / "scd.yaml")["task"] == ["scd_contact", "scd_contact_baseline", "scd_sds"]
    assert len(docs["scd_sds"]) == 280 and {d["options"][1] for d in docs["scd_sds"]} == {
        "Unlikely"
    }
    assert (out / "utils.py").read_text() == Path(utils.__file__).read_text()
    assert "import scd" not in (out / "utils.py").read_text()  # lm-eval may run without scd
    plain = export_lm_eval(tmp_path / "plain", prompts=toy_prompts, limit=LIMIT, fmt="plain")
    assert _yaml(tmp_path / "plain/scd_contact_frequency.yaml")["doc_to_text"] == (
        "{{text}}\nAnswer:"
    )
    assert "scd_sds" not in plain["tasks"] and plain["format"] == "plain"


def _cli(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        return main(argv), err.getvalue()


def test_bad_input_is_one_line_and_writes_nothing(toy_prompts, small_stigma, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    cases = [
        (["--prompts", str(small_stigma)], "not an output of `scd generate contact`"),
        (["--prompts", str(tmp_path)], "not an output of `scd generate contact`"),
        (
            ["--prompts", str(toy_prompts), "--limit", "17281"],
            "--limit 17281: above the 17,280 descriptor prompts",
        ),
        (["--stigma-prompts", str(toy_prompts)], "not an output of `scd generate stigma`"),
        ([], "nothing to export"),
    ]
    for argv, expected in cases:
        code, err = _cli(["export", "lm-eval", *argv, "--out", str(tmp_path / "task")])
        assert code == 2 and err.count("\n") == 1 and expected in err, (argv, err)
        assert not (tmp_path / "task").exists()
    code, err = _cli(["export", "lm-eval", "--prompts", str(toy_prompts), "--out", str(other)])
    assert code == 2 and "holds no scd output" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other"]  # nothing beside it either
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]


def test_the_scoring_module_agrees_with_scds_own_aggregation():
    import random

    from scd.eval.benchmarks.stigma.sds import summarize_sds

    doc = {"options": ["Yes", "No"], "biased_answer": "No", "contact": "positive"}
    assert utils.process_contact(doc, [(-2.0, False), (-0.5, True)])["bias"] == 100.0
    assert utils.process_contact(doc, [(-1.0, True), (-1.0, False)])["bias"] == 0.0  # tie: first
    cells = [("none", 100.0), ("positive", 0.0), ("positive", 100.0), ("negative", 0.0)]
    assert (utils.bias_none(cells), utils.bias_positive(cells)) == (100.0, 50.0)
    assert math.isnan(utils.bias_negative(cells[:3]))
    rng = random.Random(0)
    records, items = [], []
    for i in range(400):
        stig = i % 2 == 0
        rec = {
            "condition": f"c{i % 10}",
            "category": "x",
            "stigmatized": stig,
            "template": rng.randint(1, 4),
            "form_index": rng.randint(0, 2),
            "baseline": i % 37 == 0,
        }
        lls = [rng.uniform(-5, 0), rng.uniform(-5, 0)]
        top = max(lls)
        w = [math.exp(x - top) for x in lls]
        records.append({**rec, "p_negative": w[1] / sum(w)})
        items.append(utils.process_sds(rec, [(x, False) for x in lls])["sds_gap"])
    gap = summarize_sds(records)["gap"]
    assert utils.sds_gap(items) == pytest.approx(gap["gap"], abs=1e-12)
    assert utils.sds_stigmatized(items) == pytest.approx(gap["mean_x"], abs=1e-12)


def _lm_eval(model: Path, tasks: Path, out: Path, chat: bool) -> dict:
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    cmd = [
        sys.executable,
        "-m",
        "lm_eval",
        "--model",
        "hf",
        "--model_args",
        f"pretrained={model},dtype=float32",
        "--device",
        "cpu",
        "--batch_size",
        "32",
        "--include_path",
        str(tasks),
        "--tasks",
        "scd",
        "--output_path",
        str(out),
        *(["--apply_chat_template"] if chat else []),
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    (result,) = out.rglob("results_*.json")
    return json.loads(result.read_text())["results"]


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["chat", "plain"])
def test_lm_eval_finds_scds_bias_on_the_toy_model(
    fmt, toy_model, toy_prompts, small_stigma, tmp_path
):
    pytest.importorskip("lm_eval")
    from scd.eval.benchmarks import REGISTRY

    model = toy_model
    if fmt == "plain":  # the same model without its chat template: scd's plain format
        model = tmp_path / "plain-model"
        shutil.copytree(toy_model, model)
        config = json.loads((model / "tokenizer_config.json").read_text())
        config.pop("chat_template", None)
        (model / "tokenizer_config.json").write_text(json.dumps(config))
        (model / "chat_template.jinja").unlink(missing_ok=True)
        from scd.models.formatting import load_tokenizer

        assert not load_tokenizer(str(model)).chat_template
    export_lm_eval(
        tmp_path / "task", prompts=toy_prompts, stigma=small_stigma, limit=LIMIT, fmt=fmt
    )
    got = _lm_eval(model, tmp_path / "task", tmp_path / "lm_eval", chat=fmt == "chat")
    bias = REGISTRY["bias"].evaluate(
        str(model), tmp_path / "bias", progress=False, prompts=str(toy_prompts), limit=LIMIT
    )
    sds = REGISTRY["sds"].evaluate(
        str(model), tmp_path / "sds", progress=False, prompts=str(small_stigma)
    )
    assert 5 < bias["overall"]["pct"] < 95  # the planted bias shows: the check can fail
    assert got["scd_contact"]["bias,none"] == pytest.approx(bias["overall"]["pct"], abs=0.1)
    pooled = Counter()
    for scale, row in bias["table1"].items():
        for contact, cell in row.items():
            task = got[f"scd_contact_{scale}"]
            assert task[f"bias_{contact},none"] == pytest.approx(cell["pct"], abs=0.1)
            base = got[f"scd_contact_{scale}_baseline"][f"bias_{contact},none"]
            assert base == pytest.approx(bias["baseline"][scale][contact]["pct"], abs=0.1)
            pooled[contact, "biased"] += cell["biased"]
            pooled[contact, "n"] += cell["n"]
    for contact in ("none", "positive", "negative"):
        want = 100 * pooled[contact, "biased"] / pooled[contact, "n"]
        assert got["scd_contact"][f"bias_{contact},none"] == pytest.approx(want, abs=0.1)
    assert got["scd_sds"]["sds_gap,none"] == pytest.approx(sds["gap"]["gap"], abs=1e-4)
