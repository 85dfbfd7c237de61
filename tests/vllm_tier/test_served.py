"""``--backend openai`` against a real ``vllm serve`` (conftest's ``vllm_server``: SmolLM2 in
float32, adapter "a" a LoRA module, others loaded at run time, an API key) gives the records of
scd's in-process vLLM engine on the same model and prompts: the base model, an adapter served by
name, an adapter loaded at run time, generate mode; the key reaches the server and no file.

``--score-via echo`` is not run here: it reaches vLLM's ``prompt_logprobs``, which its CPU build
cannot combine with LoRA (the engine dies); the stub-server tests cover that protocol.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import records, same  # tests/vllm_tier/conftest.py

from scd.eval.benchmarks import get
from scd.eval.engines import SharedEngine, engine_spec

VLLM = engine_spec("vllm", dtype="float32", kv_cache_space=1.0)
LIMIT = 48
RUNS = {
    "base": {},
    "a": {},
    "b": {},
    "generate": {"mode": "generate", "max_new_tokens": 8, "limit": 16},
}


def _evaluate(smol: str, prompts: Path, root: Path, adapters: dict, **engine) -> Path:
    for name, options in RUNS.items():
        get("bias").evaluate(
            smol,
            root / name,
            prompts=prompts,
            progress=False,
            adapter=adapters.get(name),
            **{"limit": LIMIT, **options},
            **engine,
        )
    return root


@pytest.fixture(scope="module")
def in_process(smol, smol_adapters, toy_prompts, tmp_path_factory) -> Path:
    shared = SharedEngine(VLLM, smol, adapters=list(smol_adapters.values()))
    root = tmp_path_factory.mktemp("in-process")
    try:
        return _evaluate(smol, toy_prompts, root, smol_adapters, engine=VLLM, shared=shared)
    finally:
        shared.close()


@pytest.fixture(scope="module")
def served(smol, smol_adapters, toy_prompts, vllm_server, tmp_path_factory) -> Path:
    spec = engine_spec("openai", base_url=vllm_server.url, api_key_env=vllm_server.key_env)
    return _evaluate(
        smol, toy_prompts, tmp_path_factory.mktemp("served"), smol_adapters, engine=spec
    )


@pytest.mark.parametrize("name", ["base", "a", "b"])
def test_served_records_equal_the_in_process_engine(in_process, served, name) -> None:
    assert same(in_process / name, served / name) > LIMIT  # descriptor prompts + baselines


def test_adapters_change_the_answers(served) -> None:  # so the adapters were really used
    base, a, b = (records(served / n) for n in ("base", "a", "b"))
    assert [r["option_logprobs"] for r in base] != [r["option_logprobs"] for r in a]
    assert [r["option_logprobs"] for r in a] != [r["option_logprobs"] for r in b]


def test_generate_mode_gives_the_same_text(in_process, served) -> None:
    ours, theirs = records(in_process / "generate"), records(served / "generate")
    assert [r["generated"] for r in ours] == [r["generated"] for r in theirs]
    assert len(ours) > 16 and any(r["generated"] for r in ours)


def test_the_key_reached_the_server_and_no_file(served, vllm_server) -> None:
    log = vllm_server.log.read_text(errors="replace")
    # an access-log line ends with the status: '"POST /v1/completions HTTP/1.1" 200 OK' (a bare
    # "401" would also match a client port such as 127.0.0.1:54016)
    assert 'HTTP/1.1" 401' not in log and 'POST /v1/completions HTTP/1.1" 200' in log
    for path in served.rglob("*"):
        if path.is_file():
            assert vllm_server.key.encode() not in path.read_bytes(), path
