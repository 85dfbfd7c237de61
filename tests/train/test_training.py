"""SCD training on the planted-bias toy model: real TRL + PEFT runs on CPU."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from wandb_records import config_and_summary, finished_records  # tests/wandb_records.py

from scd.eval.benchmarks import get
from scd.eval.engines.vllm_setup import LORA_RANKS as VLLM_LORA_RANKS
from scd.pipeline.recipe import load_recipe
from scd.train.trainer import train

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "recipes" / "quickstart.yaml"
FAKE_SECRETS = {"WANDB_API_KEY": "wandb-secret-0123456789abcdef", "HF_TOKEN": "hf_secretTOKEN42"}


def _recipe(model: Path, out: Path, *extra: str):
    return load_recipe(QUICKSTART, [f"model={model}", f"output_dir={out}", *extra])


@pytest.fixture(scope="module")
def trained(toy_model: Path, tmp_path_factory, monkeypatch_module) -> Path:
    """One quickstart training, W&B offline, with fake secrets in the environment."""
    out = tmp_path_factory.mktemp("train") / "quickstart"
    for key, value in FAKE_SECRETS.items():
        monkeypatch_module.setenv(key, value)
    monkeypatch_module.setenv("WANDB_MODE", "offline")
    monkeypatch_module.setenv("WANDB_DIR", str(out.parent / "wandb"))
    # the quickstart keeps W&B off
    train(_recipe(toy_model, out, "wandb.enabled=true", "wandb.log_adapter=true"))
    return out


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_output_dir_holds_a_servable_adapter_and_its_provenance(trained: Path) -> None:
    for name in (
        "adapter_model.safetensors",
        "adapter_config.json",
        "tokenizer_config.json",
        "recipe.yaml",
        "data_manifest.json",
        "train_manifest.json",
    ):
        assert (trained / name).is_file(), name
    config = json.loads((trained / "adapter_config.json").read_text())
    # vLLM serves plain LoRA only
    assert not config.get("modules_to_save")
    assert config.get("use_dora") in (False, None) and config.get("bias") == "none"
    assert config["r"] in VLLM_LORA_RANKS
    assert "lm_head" not in str(config["target_modules"]) and "embed" not in str(
        config["target_modules"]
    )
    info = json.loads((trained / "train_manifest.json").read_text())
    assert info["global_step"] > 0 and info["tokens_per_second"] > 0
    assert json.loads((trained / "data_manifest.json").read_text())["setting"] == 1
    # the last step is logged too: the training loss is the mean over every step
    assert info["log_history"][-1]["step"] == info["global_step"]


def test_secrets_never_reach_outputs_or_logs(trained: Path) -> None:
    for path in trained.parent.rglob("*"):
        if path.is_file() and path.stat().st_size < 50_000_000:
            data = path.read_bytes()
            for secret in FAKE_SECRETS.values():
                assert secret.encode() not in data, path


def test_wandb_offline_run_holds_the_metrics(trained: Path) -> None:
    runs = list((trained / "wandb").rglob("offline-run-*"))  # each run in its own directory
    assert runs, "no offline W&B run directory"
    finished_records(runs[0])  # W&B's service writes the last records after finish() returns
    logged = b"".join(p.read_bytes() for p in runs[0].rglob("*.wandb"))
    assert b"train/loss" in logged
    assert b"learning_rate" in logged
    info = json.loads((trained / "train_manifest.json").read_text())
    config, summary = config_and_summary(runs[0])
    artifacts = [
        r.artifact for r in finished_records(runs[0]) if r.WhichOneof("record_type") == "artifact"
    ]
    assert config["protocol"] == "scd"  # the evaluation protocol training wrote its rows in
    # the optimizer that ran, not the recipe's CUDA default (paged AdamW): W&B and recipe.yaml
    saved = yaml.safe_load((trained / "recipe.yaml").read_text())["train"]
    assert config["recipe"]["train"]["optim"] == saved["optim"] == "adamw_torch"
    # one training loss: the mean over every step, not transformers' and scd's side by side
    assert summary["train_loss"] == pytest.approx(info["train_loss"])
    assert "scd/train_loss" not in summary and summary["scd/global_step"] == info["global_step"]
    (adapter,) = artifacts  # wandb.log_adapter: what serving the adapter alone needs
    files = {e.path for e in adapter.manifest.contents}
    assert {
        "adapter_model.safetensors",
        "adapter_config.json",
        "tokenizer.json",
        "chat_template.jinja",
    } <= files
    meta = json.loads(adapter.metadata)
    assert meta["base_model"] == info["base_model"] and meta["base_model_fingerprint"]


def test_lora_changes_and_base_stays(trained: Path, toy_model: Path) -> None:
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(toy_model)
    base_state = {k: v.clone() for k, v in base.state_dict().items()}
    adapter = load_file(trained / "adapter_model.safetensors")
    assert any("lora_B" in k and v.abs().sum() > 0 for k, v in adapter.items())  # B starts at 0
    model = PeftModel.from_pretrained(base, trained).eval()
    for name, value in model.get_base_model().state_dict().items():
        clean = name.replace(".base_layer", "")
        if "lora_" not in name and clean in base_state:
            assert torch.equal(value, base_state[clean]), name
    ids = torch.tensor([[1, 5, 9, 12, 7]])
    with torch.no_grad():
        first = model(input_ids=ids).logits
        again = (
            PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(toy_model), trained)
            .eval()(input_ids=ids)
            .logits
        )
        plain = AutoModelForCausalLM.from_pretrained(toy_model)(input_ids=ids).logits
    assert torch.allclose(first, again, atol=1e-6)
    assert not torch.allclose(first, plain, atol=1e-4)


@pytest.mark.slow
def test_training_cuts_held_out_bias_by_half(trained: Path, toy_model: Path, tmp_path) -> None:
    heldout = trained / "data" / "sft" / "heldout"
    before = get("bias").evaluate(
        str(toy_model), tmp_path / "before", prompts=heldout, progress=False
    )
    after = get("bias").evaluate(
        str(toy_model), tmp_path / "after", prompts=heldout, adapter=str(trained), progress=False
    )
    b, a = before["overall"]["pct"], after["overall"]["pct"]
    assert b > 15  # the planted bias is there before
    assert a <= 0.5 * b, (b, a)


def test_merge_gives_the_adapter_outputs(trained: Path, toy_model: Path, tmp_path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from scd.train.merge import merge_adapter

    merge_adapter(trained, tmp_path / "merged", base=str(toy_model))
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged").eval()
    peft = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(toy_model), trained
    ).eval()
    ids = torch.tensor([[1, 5, 9, 12, 7, 3]])
    with torch.no_grad():
        assert torch.allclose(merged(input_ids=ids).logits, peft(input_ids=ids).logits, atol=1e-4)
    assert (tmp_path / "merged" / "model.safetensors").is_file()


def _train_cmd(recipe: Path, model: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "scd",
        "train",
        str(recipe),
        "--no-wandb",
        "--set",
        f"model={model}",
        "--set",
        f"output_dir={out}",
        *extra,
    ]


def test_mean_loss_weights_each_logged_mean_by_its_steps() -> None:
    from scd.train.training_log import mean_loss

    history = [
        {"loss": 1.0, "step": 5},
        {"eval_loss": 9.0, "step": 5},
        {"loss": 0.4, "step": 15},
        {"train_loss": 7.0, "train_runtime": 1.0, "step": 15},
    ]
    assert mean_loss(history) == pytest.approx((1.0 * 5 + 0.4 * 10) / 15)  # 0.6, not 0.7
    assert mean_loss([]) is None and mean_loss([{"eval_loss": 1.0, "step": 5}]) is None


def _wandb_rows(run_dir: Path, killed: bool = False) -> list[tuple[int, dict[str, float]]]:
    """Every history row of an offline W&B run folder: W&B's step and the row's numbers
    (``killed``: a run whose process was killed, which never writes its exit record)."""
    rows = []
    for record in finished_records(run_dir, killed=killed):
        if record.WhichOneof("record_type") == "history":
            items = {i.key or "/".join(i.nested_key): i.value_json for i in record.history.item}
            numbers = {k: float(v) for k, v in items.items() if v[:1] not in '"{['}
            rows.append((record.history.step.num, numbers))
    return rows


@pytest.mark.slow
def test_sigkill_then_resume_continues_from_the_checkpoint(toy_model: Path, tmp_path) -> None:
    """Killed at step 10 or after, resumed: the same W&B run (one id, its history from the first
    step to the last), the loss of the whole training, the bias measured every 5 steps with each
    step once, and lines that say what happened."""
    from scd.train.training_log import mean_loss as _mean_loss

    out = tmp_path / "run"
    cmd = _train_cmd(
        QUICKSTART,
        toy_model,
        out,
        "--set",
        "train.save_steps=5",
        "--set",
        "train.max_steps=30",
        "--set",
        "wandb.enabled=true",
        "--set",
        "train.eval_every_steps=5",
        "--set",
        "train.eval_prompts=20",
    )
    cmd.remove("--no-wandb")
    env = {**os.environ, "WANDB_MODE": "offline"}
    # a W&B run of this pytest process leaves its service in WANDB_SERVICE: the killed child's
    # stream would stay open in it ("run ID ... is in use"); each child gets a service of its own
    env.pop("WANDB_SERVICE", None)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if list((out / "checkpoints").glob("checkpoint-10")):
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "train_manifest.json").exists()
    again = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert again.returncode == 2 and "--resume" in again.stderr  # no silent restart
    resumed = subprocess.run([*cmd, "--resume"], capture_output=True, text=True, env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    info = json.loads((out / "train_manifest.json").read_text())
    assert info["global_step"] == 30
    assert info["resumed_from"].startswith("checkpoint-")
    assert f"resuming training from {out / 'checkpoints' / info['resumed_from']}" in resumed.stderr
    assert "step 30/30  loss " in resumed.stderr and "wandb sync" in resumed.stderr  # a log file
    # one run: every folder has its id, and the folders in order of start time (as `wandb sync`
    # uploads them) hold each training step once, in order, at W&B step = training step
    segments = sorted((out / "wandb").glob("offline-run-*"))
    assert len(segments) == 2 and {p.name.rsplit("-", 1)[1] for p in segments} == {
        info["wandb_run_id"]
    }
    first, last = _wandb_rows(segments[0], killed=True), _wandb_rows(segments[1])
    rows = first + last
    steps = [step for step, _ in rows]
    assert steps == sorted(set(steps)) and steps[-1] == 30  # each step once, in order
    assert all(items["train/global_step"] == step for step, items in rows)
    assert [s for s, items in rows if "train/loss" in items] == list(range(5, 31, 5))
    assert [s for s, items in rows if "eval/bias_pct" in items] == list(range(5, 31, 5))
    assert all(s <= int(info["resumed_from"].split("-")[1]) + 5 for s, _ in first)  # killed
    assert f"wandb sync {out / 'wandb'}/offline-run-*-{info['wandb_run_id']}*" in resumed.stderr
    history = json.loads((out / "checkpoints" / "checkpoint-30" / "trainer_state.json").read_text())
    resumed_part = [h for h in history["log_history"] if h.get("step", 0) > 10 and "loss" in h]
    at = int(info["resumed_from"].split("-")[1])  # tokens/s: of this process's steps only
    earlier = next(h["num_input_tokens_seen"] for h in history["log_history"] if h["step"] == at)
    assert 0 < earlier < info["tokens_seen"]
    assert info["tokens_per_second"] == pytest.approx(
        (info["tokens_seen"] - earlier) / info["train_seconds"], rel=2e-3
    )
    bias_steps = [h["step"] for h in history["log_history"] if "eval_bias_pct" in h]
    assert bias_steps == [h["step"] for h in info["bias_history"]] == list(range(5, 31, 5))
    assert "bias 30/30  validation " in resumed.stderr  # each measurement a line of the log
    assert info["train_loss"] == pytest.approx(_mean_loss(history["log_history"]))
    assert info["train_loss"] != pytest.approx(
        sum(h["loss"] for h in resumed_part) / len(resumed_part)
    )


@pytest.mark.slow
def test_two_cpu_ranks_under_torchrun(toy_model: Path, tmp_path) -> None:
    """Two real CPU ranks: one data generation, one W&B run, one adapter, both ranks trained."""
    out = tmp_path / "ddp"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        "29533",
        "-m",
        "scd",
        "train",
        str(QUICKSTART),
        "--set",
        f"model={toy_model}",
        "--set",
        f"output_dir={out}",
        "--set",
        "train.max_steps=6",
        "--set",
        "train.save_steps=100",
        "--set",
        "wandb.enabled=true",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    env.pop("WANDB_API_KEY", None)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads((out / "train_manifest.json").read_text())
    assert info["world_size"] == 2 and info["global_step"] == 6
    assert proc.stdout.count("SFT data generated") == 1  # the main process alone
    assert len(list((out / "wandb").glob("offline-run-*"))) == 1
    assert (out / "adapter_model.safetensors").stat().st_size > 0


def test_a_save_that_writes_no_adapter_fails_loudly(tmp_path: Path) -> None:
    """FSDP: the save switches a sharded state dict to a full one first (transformers saves
    nothing under FSDP otherwise); a save that writes no adapter fails the run. Recorded on a
    stand-in trainer: FSDP does not run on CPU."""
    from types import SimpleNamespace

    from scd.train.saving import save_adapter

    calls = []
    plugin = SimpleNamespace(set_state_dict_type=lambda kind: calls.append(("state", kind)))

    def save_model(out: str) -> None:
        calls.append(("save", out))
        if calls[0] == ("state", "FULL_STATE_DICT"):  # what transformers does under FSDP
            (Path(out) / "adapter_model.safetensors").write_bytes(b"x")

    def trainer(fsdp: bool) -> SimpleNamespace:
        accelerator = SimpleNamespace(
            state=SimpleNamespace(fsdp_plugin=plugin), wait_for_everyone=lambda: None
        )
        return SimpleNamespace(is_fsdp_enabled=fsdp, accelerator=accelerator, save_model=save_model)

    save_adapter(trainer(True), tmp_path, main=True)
    assert calls == [("state", "FULL_STATE_DICT"), ("save", str(tmp_path))]
    calls.clear()
    (tmp_path / "adapter_model.safetensors").unlink()
    with pytest.raises(RuntimeError, match="no adapter was written"):
        save_adapter(trainer(False), tmp_path, main=True)
    save_adapter(trainer(False), tmp_path, main=False)  # other ranks do not check


def test_qlora_prepares_and_takes_a_step_on_cpu(toy_model: Path, tmp_path) -> None:
    pytest.importorskip("bitsandbytes")
    recipe = _recipe(
        toy_model,
        tmp_path / "qlora",
        "quantization=4bit",
        "train.max_steps=1",
        "wandb.enabled=false",
        "data.max_train=20",
        "data.max_eval=5",
    )
    try:
        info = train(recipe)
    except (RuntimeError, NotImplementedError) as err:  # bitsandbytes build without CPU kernels
        pytest.skip(f"bitsandbytes 4-bit is not usable on this CPU: {str(err)[:120]}")
    assert info["global_step"] == 1
    config = json.loads((tmp_path / "qlora" / "adapter_config.json").read_text())
    assert config["r"] == recipe.lora.r
    shutil.rmtree(tmp_path / "qlora")


def test_resume_skips_a_checkpoint_killed_while_being_written(tmp_path: Path) -> None:
    from scd.train.run_checks import last_checkpoint

    assert last_checkpoint(tmp_path) is None
    for step, state in ((5, "{}"), (10, '{"global_step": 10}'), (15, '{"glob')):
        (tmp_path / "checkpoints" / f"checkpoint-{step}").mkdir(parents=True)
        (tmp_path / "checkpoints" / f"checkpoint-{step}" / "trainer_state.json").write_text(state)
    (tmp_path / "checkpoints" / "checkpoint-20").mkdir()  # killed before its trainer state
    assert last_checkpoint(tmp_path) == str(tmp_path / "checkpoints" / "checkpoint-10")


def test_training_log_lines_are_readable():
    from types import SimpleNamespace

    from scd.train.training_log import log_line as _log_line

    history = [{"step": 5, "loss": 1.0}, {"step": 10, "loss": 0.5}, {"step": 12, "loss": 0.25}]
    state = SimpleNamespace(global_step=10, max_steps=50, log_history=history)
    line = _log_line(
        state,
        {
            "loss": 0.47391,
            "learning_rate": 3e-4,
            "grad_norm": 0.5587,
            "entropy": 0.88,
            "train_runtime": 3.1,
        },
    )
    assert line == "step 10/50  loss 0.4739  lr 3.0e-04  grad norm 0.5587"
    done = _log_line(state, {"train_runtime": 78.1, "train_loss": 0.8874, "epoch": 0.4})
    # the training loss of every step as recorded (not transformers' train_loss of a session):
    # (5 x 1.0 + 5 x 0.5 + 2 x 0.25) / 12
    assert done == "trained 10 steps in 78 s, training loss 0.6667 (the mean over every step)"


def test_training_in_the_paper_chat_protocols_text(toy_model: Path, tmp_path) -> None:
    """eval.bias.protocol paper-chat: the SFT rows carry the paper's system prompt and wording,
    TRL's tokens are checked against what that protocol's evaluation scores, and a protocol that
    no chat-template training can reproduce is refused when the recipe loads."""
    import pyarrow.parquet as pq

    from scd.errors import InputError
    from scd.models.formatting import Formatter, load_tokenizer
    from scd.models.protocols import PAPER_SYSTEM_PROMPT, PROTOCOLS

    out = tmp_path / "paper-chat"
    extra = ["train.max_steps=1", "wandb.enabled=false", "data.max_train=20", "data.max_eval=5"]
    info = train(_recipe(toy_model, out, "eval.bias.protocol=paper-chat", *extra))
    assert info["token_check_rows"] > 0  # every checked row: training's tokens = evaluation's
    rows = pq.read_table(out / "data" / "sft" / "train.parquet").to_pylist()
    system = {"role": "system", "content": PAPER_SYSTEM_PROMPT}
    assert all(r["prompt"][0] == system for r in rows)
    row = next(r for r in rows if r["answer"])
    user = row["prompt"][1]["content"]
    assert user.startswith("Follow the instruction: ") and user.endswith(" \n Answer:\n")
    fmt = Formatter(load_tokenizer(str(toy_model)))
    evaluated = PROTOCOLS["paper-chat"].formatter(fmt).encode([user])[0]
    assert evaluated == Formatter(fmt.tokenizer, PAPER_SYSTEM_PROMPT).encode([user])[0]
    assert json.loads((out / "data" / "sft" / "manifest.json").read_text())["protocol"] == (
        "paper-chat"
    )
    with pytest.raises(InputError, match="eval.bias.protocol: 'paper': training goes through"):
        _recipe(toy_model, tmp_path / "paper", "eval.bias.protocol=paper", *extra)


@pytest.mark.slow
def test_bias_while_training_is_scd_eval_bias_of_that_steps_checkpoint(
    toy_model: Path, tmp_path
) -> None:
    """train.eval_every_steps: the model being trained answers validation prompts (none of them
    a training row or a held-out prompt) every N steps; each measurement equals scd eval bias of
    the checkpoint saved at that step, and the training log has a line for it."""
    import pyarrow.parquet as pq

    out = tmp_path / "steps"
    extra = [
        "train.max_steps=10",
        "train.save_steps=5",
        "train.save_total_limit=3",
        "train.eval_every_steps=5",
        "train.eval_prompts=30",
        "wandb.enabled=false",
    ]
    recipe = _recipe(toy_model, out, *extra)
    info = train(recipe)
    history = info["bias_history"]
    assert [h["step"] for h in history] == [5, 10]
    sft = out / "data" / "sft"
    ids = {
        name: set(pq.read_table(sft / name / "prompts.parquet")["prompt_id"].to_pylist())
        for name in ("validation", "heldout")
    }
    trained_ids = set(pq.read_table(sft / "train.parquet")["prompt_id"].to_pylist())
    assert ids["validation"] and not ids["validation"] & (ids["heldout"] | trained_ids)
    for h in history:
        result = get("bias").evaluate(
            str(toy_model),
            tmp_path / f"eval-{h['step']}",
            prompts=sft / "validation",
            limit=30,
            seed=recipe.train.seed,
            progress=False,
            adapter=str(out / "checkpoints" / f"checkpoint-{h['step']}"),
        )
        assert h["eval_bias_n"] == result["overall"]["n"]
        assert h["eval_bias_pct"] == pytest.approx(result["overall"]["pct"], abs=1e-3)
        assert h["eval_bias_ci_low"] <= h["eval_bias_pct"] <= h["eval_bias_ci_high"]
        assert h["eval_descriptor_effect_pts"] == pytest.approx(
            h["eval_bias_pct"] - h["eval_baseline_pct"], abs=1e-3
        )


@pytest.mark.slow
def test_select_best_keeps_the_measured_step_with_the_lowest_bias_within_the_kl_bound(
    toy_model: Path, tmp_path
) -> None:
    """train.select best: every measured step is saved, the adapter kept is the one of the
    lowest validation bias (ties: lower KL, earlier step) and survives save_total_limit; a KL
    bound no step meets keeps the last step and says so; best without measurements is refused."""
    from scd.errors import InputError

    extra = [
        "train.max_steps=12",
        "train.save_steps=100",
        "train.save_total_limit=1",
        "train.eval_every_steps=4",
        "train.eval_prompts=20",
        "train.select=best",
        "wandb.enabled=false",
    ]
    out = tmp_path / "best"
    info = train(_recipe(toy_model, out, *extra))
    history = info["bias_history"]
    assert [h["step"] for h in history] == [4, 8, 12] and all(h["eval_kl"] > 0 for h in history)
    best = min(history, key=lambda h: (h["eval_bias_pct"], h["eval_kl"], h["step"]))
    chosen = info["selected"]
    assert chosen["rule"] == "best" and chosen["step"] == best["step"]
    assert chosen["why"] == "the lowest validation bias of 3 measured steps"
    kept = out / "checkpoints" / f"checkpoint-{best['step']}" / "adapter_model.safetensors"
    assert kept.read_bytes() == (out / "adapter_model.safetensors").read_bytes()
    # the kept step's KL (its base side measured at step 4 and kept) is the KL the arena
    # measures of the kept adapter from scratch
    from scd.eval.capability import kl_from_base

    alone = kl_from_base(str(toy_model), tmp_path / "kl", adapter=str(out), batch_size=8)
    assert alone["kl_mean"] == pytest.approx(best["eval_kl"], rel=1e-4, abs=1e-6)

    bound = train(_recipe(toy_model, tmp_path / "bound", *extra, "train.max_kl=0.0"))
    assert bound["selected"]["step"] == 12
    assert bound["selected"]["why"].startswith("no measured step of 3 had KL <= 0.0")
    with pytest.raises(InputError, match="train.select: best chooses among measured steps"):
        _recipe(toy_model, tmp_path / "x", "train.select=best")


@pytest.mark.slow
def test_select_best_with_the_judgment_gate_measures_judgment_at_every_measured_step(
    toy_model: Path, tmp_path
) -> None:
    """train.select_judgment: each measured step also answers the training templates' relevance
    controls (the toy model reads no cue, so no step is gated and the lowest bias is kept)."""
    extra = [
        "train.max_steps=8",
        "train.save_steps=100",
        "train.eval_every_steps=4",
        "train.eval_prompts=20",
        "train.select=best",
        "train.select_judgment=true",
        "wandb.enabled=false",
    ]
    info = train(_recipe(toy_model, tmp_path / "gated", *extra))
    history = info["bias_history"]
    assert [h["step"] for h in history] == [4, 8]
    assert all(0 <= h["eval_judgment_pct"] <= 100 for h in history)
    assert not any("eval_judgment_gate" in h for h in history)  # its base reads no cue
    best = min(history, key=lambda h: (h["eval_bias_pct"], h["eval_kl"], h["step"]))
    assert info["selected"]["step"] == best["step"]
    assert info["selected"]["why"].endswith("with the judgment gate kept")


@pytest.mark.slow
def test_dpo_and_kto_measure_bias_as_they_train_and_can_keep_the_best_step(
    toy_model: Path, tmp_path
) -> None:
    """The preference arms measure on the validation prompts of the setting their rows were
    made from, as SFT does, and select best among their measured steps."""
    extra = [
        "train.max_steps=6",
        "train.save_steps=100",
        "train.eval_every_steps=3",
        "train.eval_prompts=20",
        "train.select=best",
        "train.per_device_train_batch_size=2",
        "wandb.enabled=false",
    ]
    for method in ("dpo", "kto"):
        out = tmp_path / method
        info = train(_recipe(toy_model, out, *extra), method=method)
        history = info["bias_history"]
        assert [h["step"] for h in history] == [3, 6] and all(h["eval_kl"] > 0 for h in history)
        best = min(history, key=lambda h: (h["eval_bias_pct"], h["eval_kl"], h["step"]))
        assert info["selected"]["rule"] == "best" and info["selected"]["step"] == best["step"]
        state = json.loads(
            (out / "checkpoints" / "checkpoint-6" / "trainer_state.json").read_text()
        )
        assert [e["step"] for e in state["log_history"] if "eval_bias_pct" in e] == [3, 6]


def test_validation_prompts_of_a_setting_and_of_the_arms_made_from_it(toy_prompts, tmp_path):
    """Validation prompts: none a training row or a held-out prompt; the arena's general arm
    measures on its setting's; SFT data without them is one line."""
    import pyarrow.parquet as pq

    from scd.data_gen.arms import write_general_rows
    from scd.data_gen.sft import write_sft
    from scd.errors import InputError
    from scd.train.bias_steps import validation_rows

    sft = tmp_path / "sft"
    write_sft(toy_prompts, 1, sft, max_train=50, max_eval=5)
    rows = validation_rows(sft, 20, 0)
    ids = {r["prompt_id"] for r in rows if not r["baseline"]}
    trained = set(pq.read_table(sft / "train.parquet")["prompt_id"].to_pylist())
    heldout = set(pq.read_table(sft / "heldout" / "prompts.parquet")["prompt_id"].to_pylist())
    assert ids and not ids & (trained | heldout) and any(r["baseline"] for r in rows)
    write_general_rows(sft, tmp_path / "general", "scd:general", 0)
    assert validation_rows(tmp_path / "general", 20, 0) == rows
    shutil.rmtree(sft / "validation")  # SFT data of an older scd
    with pytest.raises(InputError, match="has no validation prompts"):
        validation_rows(sft, 20, 0)


@pytest.mark.parametrize("method", ["sft", "dpo"])
def test_the_lm_head_scores_only_labelled_tokens_on_a_cpu_with_the_same_training(
    method: str, toy_model: Path, tmp_path: Path, monkeypatch
) -> None:
    """TRL's fused LM head on a CPU, as scd sets it: only the tokens with a label are projected
    (TRL projects every token there), with the same losses and gradient norms step by step."""
    from trl.kernels import chunked_logprob
    from trl.trainer import utils

    import scd.train.method_trainer as trainer_module
    from scd.train.setup import score_labelled_tokens_only

    projected: list[int] = []  # the positions the head projects, call by call
    apply = utils._ChunkedLogProbFunction.apply

    def counting(hidden, *args):
        projected.append(hidden.shape[0])
        return apply(hidden, *args)

    monkeypatch.setattr(utils._ChunkedLogProbFunction, "apply", counting)

    def run(name: str, fix) -> tuple[list[tuple[float, float]], int]:
        projected.clear()
        monkeypatch.setattr(utils, "_use_triton", chunked_logprob._use_triton)  # TRL as installed
        monkeypatch.setattr(trainer_module, "score_labelled_tokens_only", fix)
        out = tmp_path / name
        keys = ["train.max_steps=4", "train.logging_steps=1", "train.save_steps=100"]
        train(_recipe(toy_model, out, *keys), method=method, use_wandb=False, progress=False)
        state = out / "checkpoints" / "checkpoint-4" / "trainer_state.json"
        log = json.loads(state.read_text())["log_history"]
        return [(h["loss"], h["grad_norm"]) for h in log if "loss" in h], sum(projected)

    every, every_rows = run("every", lambda: False)  # TRL's own choice on a CPU
    labelled, labelled_rows = run("labelled", score_labelled_tokens_only)
    assert labelled_rows < every_rows / 4 and len(labelled) == len(every) == 4
    for (loss, grad), (loss0, grad0) in zip(labelled, every):
        assert loss == pytest.approx(loss0, rel=1e-5) and grad == pytest.approx(grad0, rel=1e-4)
