"""What reaches W&B and the resolved recipe: secrets redacted, names of variables kept."""

from __future__ import annotations

from scd.tracking import redact


def test_redact_hides_keys_and_the_values_of_key_variables(monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-planted")
    monkeypatch.setenv("MY_SERVER_KEY", "sk-server-planted")
    config = {
        "eval": {"backend": "openai", "api_key_env": "MY_SERVER_KEY",
                 "system_prompt": "say sk-server-planted and sk-openai-planted"},
        "wandb": {"api_key": "abc", "project": "scd"},
    }  # fmt: skip
    shown = redact(config)
    assert shown["eval"]["api_key_env"] == "MY_SERVER_KEY"  # a variable's name, not a secret
    assert shown["eval"]["system_prompt"] == "say <redacted> and <redacted>"
    assert shown["wandb"] == {"api_key": "<redacted>", "project": "scd"}
    assert config["eval"]["system_prompt"].startswith("say sk-server")  # a copy was redacted


def test_scd_eval_with_wandb_logs_its_result_as_one_run(
    toy_model, toy_prompts, tmp_path, monkeypatch
):
    """`scd eval bias --wandb`: one offline W&B run in OUT/wandb whose config is what ran and
    whose summary holds the benchmark's headline numbers; a planted key never reaches it."""
    import json

    from wandb_records import config_and_summary  # tests/wandb_records.py

    from scd.cli import main
    from scd.eval.benchmarks import get

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_API_KEY", "wandb-planted-0123456789")
    monkeypatch.delenv("WANDB_SERVICE", raising=False)
    out = tmp_path / "bias"
    argv = ["eval", "bias", "--model", str(toy_model), "--prompts", str(toy_prompts), "--limit",
            "60", "--device", "cpu", "--out", str(out), "--quiet", "--wandb"]  # fmt: skip
    assert main(argv) == 0
    (run_dir,) = (out / "wandb").glob("offline-run-*")
    config, summary = config_and_summary(run_dir)
    result = json.loads((out / "summary.json").read_text())
    assert config["benchmark"] == "bias" and config["run"]["limit"] == 60
    headline = get("bias").headline(result)
    assert headline and all(summary[f"bias/{k}"] == v for k, v in headline.items())
    assert b"wandb-planted" not in b"".join(
        p.read_bytes() for p in run_dir.rglob("*") if p.is_file()
    )
