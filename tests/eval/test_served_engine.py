"""``--backend openai`` against a local stub server (tests/eval/served_stub.py) on the toy model:
the same records as ``--backend hf``, by both scoring protocols and in generate mode; faults
(429, 500, 503, a dropped connection, a malformed or incomplete answer, a timeout) lose and
duplicate nothing; retries that run out, bad input and a refused key are one line, exit 2, with
nothing half-written; the API key is sent and never written. The real ``vllm serve``:
tests/vllm_tier/test_served.py.
"""

from __future__ import annotations

import json
import math
import socket
from pathlib import Path

import pytest
from served_stub import StubServer  # tests/eval/served_stub.py

from scd.cli import main
from scd.config.engine import EngineSpec, engine_spec
from scd.errors import InputError
from scd.eval.benchmarks import get
from scd.eval.engines import ChoiceRequest
from scd.eval.engines.openai import OpenAIEngine

HF = engine_spec(dtype="float32", device="cpu")
LIMIT, CHUNK = 48, 16
TOLERANCE = 1e-4  # |Δ log-prob|: hf batches and pads, the stub runs one sequence per forward


@pytest.fixture(autouse=True)
def _no_ambient_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def _records(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]


def _same(a: Path, b: Path) -> int:
    """Equal records, option log-probs (and the probabilities from them) within TOLERANCE;
    returns how many."""
    ra, rb = _records(a), _records(b)
    assert len(ra) == len(rb) > 0
    for x, y in zip(ra, rb):
        for key in ("option_logprobs", "option_probs"):
            p, q = x.pop(key, None) or [], y.pop(key, None) or []
            assert max((abs(u - v) for u, v in zip(p, q, strict=True)), default=0) <= TOLERANCE
        assert x == y
    return len(ra)


def _eval(model: Path, prompts: Path, out: Path, spec: EngineSpec, **options) -> dict:
    options = {"limit": LIMIT, "chunk_size": CHUNK, **options}
    return get("bias").evaluate(
        str(model), out, prompts=prompts, engine=spec, progress=False, **options
    )


def _served(stub: StubServer, **options) -> EngineSpec:
    return engine_spec("openai", base_url=stub.url, **options)


@pytest.fixture(scope="module")
def hf_run(toy_model, toy_prompts, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("served") / "hf"
    _eval(toy_model, toy_prompts, out, HF)
    return out


@pytest.fixture(scope="module")
def stub(toy_model):
    with StubServer(toy_model) as server:
        yield server


@pytest.fixture(autouse=True)
def _healthy(stub) -> None:
    stub.faults.clear()
    stub.fail_always = False
    stub.bodies.clear()
    stub.headers.clear()


@pytest.mark.parametrize("via", ["token_ids", "echo"])
def test_served_records_equal_hf(toy_model, toy_prompts, hf_run, stub, tmp_path, via) -> None:
    summary = _eval(toy_model, toy_prompts, tmp_path / "served", _served(stub, score_via=via))
    assert _same(hf_run, tmp_path / "served") > LIMIT  # descriptor prompts and baselines
    assert summary["run"]["engine"]["score_via"] == via
    bodies = stub.bodies[1:]  # after the probe
    assert bodies and all(b["model"] == "stub" and b["temperature"] == 0.0 for b in bodies)
    if via == "token_ids":  # prefixes that ask for the same ids share a request
        assert all(b["max_tokens"] == 1 and 0 < len(b["logprob_token_ids"]) <= 128 for b in bodies)
        assert max(len(b["prompt"]) for b in bodies) > 1
        assert all(len(b["prompt"]) <= 16 for b in bodies)
    else:  # one request per (prompt, option), whose tokens come back echoed
        assert all(b["echo"] and isinstance(b["prompt"][0], int) for b in bodies)
    assert set(stub.headers) == {None}  # no key set: no Authorization header


def test_generate_mode_equals_hf(toy_model, toy_prompts, stub, tmp_path) -> None:
    for spec, out in ((HF, "hf"), (_served(stub), "served")):
        _eval(
            toy_model,
            toy_prompts,
            tmp_path / out,
            spec,
            mode="generate",
            max_new_tokens=4,
            limit=16,
        )
    assert _same(tmp_path / "hf", tmp_path / "served") > 16


def test_chat_api_choice_reads_the_first_tokens_top_logprobs(
    toy_model, toy_prompts, hf_run, stub, tmp_path
) -> None:
    summary = _eval(toy_model, toy_prompts, tmp_path / "chat", _served(stub, api="chat"))
    assert summary["run"]["engine"]["api"] == "chat"
    found = 0
    for ours, theirs in zip(_records(hf_run), _records(tmp_path / "chat"), strict=True):
        if None in theirs["option_logprobs"]:  # an option outside the top 20: no probabilities
            assert theirs["option_probs"] is None
            continue
        found += 1  # the toy tokenizer's options are one token each: hf's numbers
        assert theirs["chosen"] == ours["chosen"]
        assert theirs["option_logprobs"] == pytest.approx(ours["option_logprobs"], abs=TOLERANCE)
    assert found > LIMIT // 2
    body = stub.bodies[-1]
    assert body["top_logprobs"] == 20 and body["max_tokens"] == 1 and body["logprobs"] is True
    assert body["messages"][-1]["role"] == "user" and "prompt" not in body


def test_chat_api_generate_mode_equals_hf(toy_model, toy_prompts, stub, tmp_path) -> None:
    for spec, out in ((HF, "hf"), (_served(stub, api="chat"), "chat")):
        _eval(
            toy_model,
            toy_prompts,
            tmp_path / out,
            spec,
            mode="generate",
            max_new_tokens=4,
            limit=16,
        )
    assert _same(tmp_path / "hf", tmp_path / "chat") > 16


def test_bbq_through_a_chat_api_in_generate_mode(toy_model, shared_data, stub, tmp_path) -> None:
    """BBQ's lettered generate mode through a chat API gives the records of --backend hf."""
    data = shared_data / "bbq" / "data"
    for spec, out in ((HF, "hf"), (_served(stub, api="chat"), "chat")):
        options = dict(limit=12, mode="generate", max_new_tokens=4, progress=False)
        get("bbq").evaluate(str(toy_model), tmp_path / out, data=data, engine=spec, **options)
    assert _records(tmp_path / "hf") == _records(tmp_path / "chat")
    assert stub.bodies[-1]["messages"][-1]["content"].endswith("(A, B or C).")


def test_chat_api_refuses_what_it_cannot_score(toy_model, stub) -> None:
    engine = OpenAIEngine(str(toy_model), _served(stub, api="chat"))
    with pytest.raises(InputError, match="scores only what scd eval bias asks"):
        engine.score([ChoiceRequest((1, 2), ((3,), (4,)))])  # BBQ's, SDS's: no conversation
    two_words = ChoiceRequest((1,), ((3,), (4,)), (("user", "Who?"),), ("The man", "Unknown"))
    with pytest.raises(InputError, match="one-word options, not 'The man'"):
        engine.score([two_words])


def test_faults_lose_and_duplicate_nothing(toy_model, toy_prompts, hf_run, stub, tmp_path) -> None:
    faults = ["429", "drop", "malformed", "500", "slow", "half", "503"]
    stub.faults.extend(["", *faults])  # the engine's probe at start is answered
    spec = _served(stub, request_timeout=1.0, concurrency=2)  # "slow" answers after 2 s
    _eval(toy_model, toy_prompts, tmp_path / "served", spec)
    assert not stub.faults  # every fault was met ...
    assert _same(hf_run, tmp_path / "served") > LIMIT  # ... and retried to the same records


def _run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    try:
        code = main(args)
    except SystemExit as stop:  # argparse's own refusal of a flag's value
        code = stop.code
    out, err = capsys.readouterr()
    return code, out, err


def _bias_args(
    model: Path, prompts: Path, out: Path, url: str, *extra: str, limit: int = LIMIT
) -> list[str]:
    return [
        "eval",
        "bias",
        "--model",
        str(model),
        "--prompts",
        str(prompts),
        "--out",
        str(out),
        "--limit",
        str(limit),
        "--chunk-size",
        str(CHUNK),
        "--quiet",
        "--backend",
        "openai",
        "--base-url",
        url,
        *extra,
    ]


def test_retries_that_run_out_stop_with_one_line_and_resume(
    toy_model, toy_prompts, hf_run, stub, tmp_path, capsys, monkeypatch
) -> None:
    from scd.eval.records import RecordLog

    append = RecordLog.append

    def first_chunk_then_500(self, records):  # the server fails for good after one chunk
        append(self, records)
        stub.fail_always = True

    monkeypatch.setattr(RecordLog, "append", first_chunk_then_500)
    out = tmp_path / "served"
    code, _, err = _run_cli(
        _bias_args(toy_model, toy_prompts, out, stub.url, "--retries", "2"), capsys
    )
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "500" in err and "after 3 tries" in err and "re-run resumes" in err
    assert len(_records(out)) == CHUNK  # the chunk before the failure, whole
    monkeypatch.setattr(RecordLog, "append", append)
    stub.fail_always = False
    code, _, err = _run_cli(_bias_args(toy_model, toy_prompts, out, stub.url), capsys)
    assert code == 0, err
    assert _same(hf_run, out) > LIMIT
    ids = [r["prompt_id"] for r in _records(out)]
    assert len(ids) == len(set(ids))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    ("url", "extra", "expected"),
    [
        ("FREE", [], "no connection to the server"),
        ("http://127.0.0.1:abc/v1", [], "with a valid port"),
        ("http://127.0.0.1:8000/v1?key=sk-x", [], "no ?query or #fragment"),
        ("STUB", ["--served-model", "nope"], "--served-model nope: the server at"),
        ("http://user:pw@127.0.0.1:9/v1", [], "put no credentials in the URL"),
        ("ftp://127.0.0.1/v1", [], "expected an http:// or https:// URL"),
    ],
)
def test_bad_server_input_is_one_line(
    toy_model, toy_prompts, stub, tmp_path, capsys, url, extra, expected
) -> None:
    out = tmp_path / "out"
    url = {"STUB": stub.url, "FREE": f"http://127.0.0.1:{_free_port()}/v1"}.get(url, url)
    code, _, err = _run_cli(_bias_args(toy_model, toy_prompts, out, url, *extra), capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and expected in err, err
    assert "Traceback" not in err and not out.exists()
    if "nope" in extra:
        assert "it serves: stub" in err
    assert "pw" not in err and "sk-x" not in err  # credentials are never shown


def test_no_url_is_one_line(toy_model, toy_prompts, tmp_path, capsys) -> None:
    args = _bias_args(toy_model, toy_prompts, tmp_path / "out", "x")[:-2]
    code, _, err = _run_cli(args, capsys)
    assert code == 2 and "--base-url: the server's API is needed" in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_a_server_without_logprobs_refuses_choice_mode_only(
    toy_model, toy_prompts, tmp_path, capsys
) -> None:
    with StubServer(toy_model, token_ids=False, echo=False) as bare:
        out = tmp_path / "choice"
        code, _, err = _run_cli(_bias_args(toy_model, toy_prompts, out, bare.url), capsys)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "gives no option log-probs via token_ids" in err and "--mode generate" in err
        assert not out.exists()  # nothing half-written: no run.json pinning this config
        args = _bias_args(toy_model, toy_prompts, out, bare.url, "--mode", "generate", limit=8)
        code, _, err = _run_cli(args, capsys)
        assert code == 0, err
        assert len(_records(out)) > 8


def test_a_server_that_refuses_vllms_fields_still_generates(
    toy_model, toy_prompts, tmp_path, capsys
) -> None:
    with StubServer(toy_model, strict=True) as strict:  # as OpenAI's API answers them: 400
        out = tmp_path / "out"
        code, _, err = _run_cli(_bias_args(toy_model, toy_prompts, out, strict.url), capsys)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "Unrecognized request argument supplied: logprob_token_ids" in err
        assert "--score-via echo" in err and not out.exists()
        args = _bias_args(toy_model, toy_prompts, out, strict.url, "--mode", "generate", limit=8)
        code, _, err = _run_cli(args, capsys)
        assert code == 0, err


def test_another_models_tokenizer_is_refused(toy_model, real_tokenizers, tmp_path) -> None:
    from transformers import AutoTokenizer

    with StubServer(toy_model) as other:
        other.tokenizer = AutoTokenizer.from_pretrained(real_tokenizers / "qwen3")
        local = AutoTokenizer.from_pretrained(toy_model)
        with pytest.raises(InputError, match="tokenizer splits text differently"):
            OpenAIEngine(str(toy_model), _served(other), tokenizer=local)


def test_adapters_go_by_their_served_name(toy_model, tmp_path) -> None:
    adapters = {}
    for name in ("static", "runtime", "unserved"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "adapter_config.json").write_text("{}")
        adapters[name] = str(tmp_path / name)
    with StubServer(toy_model, adapters={"tuned": adapters["static"]}) as server:
        engine = OpenAIEngine(str(toy_model), _served(server))
        request = [ChoiceRequest((1, 2, 3), ((4,), (5,)))]
        engine.use_adapter(adapters["static"])
        engine.score(request)
        assert server.bodies[-1]["model"] == "tuned"
        engine.use_adapter(None)
        engine.score(request)
        assert server.bodies[-1]["model"] == "stub"
        with pytest.raises(InputError, match="--lora-modules NAME="):
            engine.use_adapter(adapters["unserved"])
        server.load_adapters = True  # vLLM with VLLM_ALLOW_RUNTIME_LORA_UPDATING=1
        engine.use_adapter(adapters["runtime"])
        engine.score(request)
        assert server.bodies[-1]["model"].startswith("scd-")
        assert server.adapters[server.bodies[-1]["model"]] == adapters["runtime"]
        weights = tmp_path / "runtime" / "adapter_model.safetensors"
        weights.write_bytes(b"first")
        first = OpenAIEngine(str(toy_model), _served(server))
        first.use_adapter(adapters["runtime"])
        weights.write_bytes(b"trained again")  # same path, new weights: loaded again
        again = OpenAIEngine(str(toy_model), _served(server))
        again.use_adapter(adapters["runtime"])
        assert again.model != first.model and again.model in server.adapters
        first.use_adapter(adapters["runtime"])  # its own adapters are remembered by name
        by_name = OpenAIEngine(str(toy_model), _served(server, served_model="tuned"))
        by_name.score(request)  # an adapter the server holds, with no files here: by its name
        assert server.bodies[-1]["model"] == "tuned"


def test_the_api_key_is_sent_and_never_written(
    toy_model, toy_prompts, tmp_path, capsys, monkeypatch
) -> None:
    key = "sk-planted-3f9a1c7e5b"
    monkeypatch.setenv("MY_SERVER_KEY", key)
    with StubServer(toy_model, api_key=key) as locked:
        base = [
            *_bias_args(toy_model, toy_prompts, tmp_path / "ok", locked.url),
            "--api-key-env",
            "MY_SERVER_KEY",
        ]
        code, out, err = _run_cli(base, capsys)
        assert code == 0, err
        assert set(locked.headers) == {f"Bearer {key}"}
        seen = out + err
        monkeypatch.setenv("MY_SERVER_KEY", "sk-wrong")
        args = [
            *_bias_args(toy_model, toy_prompts, tmp_path / "refused", locked.url),
            "--api-key-env",
            "MY_SERVER_KEY",
        ]
        code, out, err = _run_cli(args, capsys)
        assert code == 2 and "refused the API key" in err and "$MY_SERVER_KEY" in err, err
        assert "sk-wrong" not in err
        seen += out + err
        monkeypatch.setenv("MY_SERVER_KEY", key)
        locked.fail_always = True
        args = [
            *_bias_args(toy_model, toy_prompts, tmp_path / "failed", locked.url),
            "--api-key-env",
            "MY_SERVER_KEY",
            "--retries",
            "0",
            "--seed",
            "1",
        ]
        code, out, err = _run_cli(args, capsys)
        assert code == 2, err
        seen += out + err
    assert key not in seen
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path


def test_options_of_the_served_engine_belong_to_it() -> None:
    with pytest.raises(InputError, match="an option of the openai backend"):
        engine_spec("hf", base_url="http://127.0.0.1:8000/v1")
    served = engine_spec("openai", base_url="http://x/v1", score_via="echo", concurrency=2)
    assert served.identity()["base_url"] == "http://x/v1"  # another server: another run
    assert served.identity()["score_via"] == "echo" and "concurrency" not in served.identity()
    assert set(HF.identity()) == {"backend", "dtype", "system_prompt"}  # earlier runs' keys


def test_openai_s_key_goes_to_openai_only(toy_model, stub, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-for-openai-only")
    OpenAIEngine(str(toy_model), _served(stub)).score([ChoiceRequest((1, 2), ((3,), (4,)))])
    assert set(stub.headers) == {None}  # 127.0.0.1 is not api.openai.com
    from scd.eval.engines.openai_setup import default_key_env

    assert default_key_env("https://api.openai.com/v1") == "OPENAI_API_KEY"


def test_chat_scores_give_no_answer_when_a_missing_option_may_lead() -> None:
    from scd.eval.engines.chat_api import option_logprobs

    def answer(*top):
        tops = [{"token": t, "logprob": v} for t, v in top]
        return {"choices": [{"logprobs": {"content": [{"top_logprobs": tops}]}}]}

    options = ("Likely", "Unlikely")  # "Unlikely" is two tokens for many tokenizers
    assert option_logprobs(answer(("Un", -0.2), ("Likely", -2.0)), options) == [None, None]
    assert option_logprobs(answer(("Likely", -0.2), ("Un", -2.0)), options) == [-0.2, None]
    both = option_logprobs(answer(("Likely", -0.5), (" Likely", -1.5), ("Unlikely", -1.0)), options)
    assert both[0] == pytest.approx(math.log(math.exp(-0.5) + math.exp(-1.5))) and both[1] == -1.0
