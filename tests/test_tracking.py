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
