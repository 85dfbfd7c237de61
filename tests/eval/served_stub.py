"""A small OpenAI-compatible server on 127.0.0.1 for the served-model engine's tests: vLLM's
completions protocol (token-id prompts, ``logprob_token_ids``, ``echo`` + ``logprobs``, greedy
generation), chat completions (``top_logprobs``, greedy replies), ``/v1/models``, ``/tokenize``,
an API key, and faults injected on demand -- what a real ``vllm serve`` cannot be made to do (the
vllm tier runs the real one).

Answers come from a transformers model (float32, one sequence per forward pass), so a served
evaluation can be compared with ``--backend hf`` on the same model.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import torch

FAULTS = ("429", "500", "503", "drop", "malformed", "slow", "half")
OPENAI_FIELDS = {
    "model",
    "prompt",
    "messages",
    "max_tokens",
    "temperature",
    "logprobs",
    "top_logprobs",
    "echo",
}


class _Server(ThreadingHTTPServer):
    """A client that hangs up while its request is answered (a fault test stopping with
    requests in flight) is no error of the server's: socketserver would print its traceback into
    the test's captured stderr, beside the one line the test reads there."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class StubServer:
    """``with StubServer(model_dir) as s: s.url``; ``s.faults.extend([...])`` makes the next
    completions requests fail that way, one fault per request; ``fail_always`` makes every one
    answer 500; ``s.bodies`` holds every completions body received."""

    def __init__(
        self,
        model: Path | str,
        *,
        name: str = "stub",
        api_key: str | None = None,
        token_ids: bool = True,
        echo: bool = True,
        slow_s: float = 2.0,
        adapters: dict[str, str] | None = None,
        load_adapters: bool = False,
        strict: bool = False,
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        # a server's own output is not the client's: its weight-loading bar would otherwise
        # reach the tests' captured stderr whenever no hf engine has switched it off before
        hf_logging.disable_progress_bar()

        self.model_dir, self.name, self.api_key = str(model), name, api_key
        self.token_ids, self.echo, self.slow_s = token_ids, echo, slow_s
        self.adapters = dict(adapters or {})  # served name -> path
        self.load_adapters = load_adapters
        self.strict = strict  # refuse fields outside OpenAI's own protocol, as OpenAI does
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        self.lm = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=torch.float32).eval()
        self.faults: deque[str] = deque()
        self.fail_always = False
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[str | None] = []
        self.lock = threading.Lock()
        self.server = _Server(("127.0.0.1", 0), _handler(self))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> StubServer:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- the model ---------------------------------------------------------------------------
    def logprobs(self, ids: list[int]) -> torch.Tensor:
        """Log-softmax at every position of ``ids`` ([len, vocab])."""
        with self.lock, torch.no_grad():
            return self.lm(torch.tensor([ids])).logits[0].float().log_softmax(-1)

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        prompts = body["prompt"]
        prompts = [prompts] if prompts and isinstance(prompts[0], int) else prompts
        choices = []
        for index, ids in enumerate(prompts):
            choice: dict[str, Any] = {"index": index, "text": "", "logprobs": None}
            wanted = body.get("logprob_token_ids") if self.token_ids else None
            if body.get("echo") and self.echo:
                table = self.logprobs(ids)
                values = [None] + [float(table[j - 1, t]) for j, t in enumerate(ids) if j]
                choice["logprobs"] = {
                    "tokens": [f"token_id:{t}" for t in ids],
                    "token_logprobs": values,
                    "top_logprobs": None,
                }
            elif wanted:
                last = self.logprobs(ids)[-1]
                top = int(last.argmax())
                step = {f"token_id:{t}": float(last[t]) for t in (*wanted, top)}
                choice["logprobs"] = {
                    "tokens": [f"token_id:{top}"],
                    "token_logprobs": [float(last[top])],
                    "top_logprobs": [step],
                }
            else:
                with self.lock, torch.no_grad():
                    out = self.lm.generate(
                        torch.tensor([ids]),
                        max_new_tokens=body["max_tokens"],
                        do_sample=False,
                        pad_token_id=0,
                    )
                choice["text"] = self.tokenizer.decode(out[0, len(ids) :], skip_special_tokens=True)
            choices.append(choice)
        return {"object": "text_completion", "model": body["model"], "choices": choices}

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        """A chat completion: the model's own chat template (as a served model applies it), the
        first reply token's top log-probs when asked, else greedy text."""
        text = self.tokenizer.apply_chat_template(
            body["messages"], tokenize=False, add_generation_prompt=True
        )
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        k = body.get("top_logprobs") if body.get("logprobs") else None
        if k:
            values, tokens = self.logprobs(ids)[-1].topk(k)
            top = [
                {"token": self.tokenizer.decode([t]), "logprob": float(v)}
                for v, t in zip(values.tolist(), tokens.tolist())
            ]
            reply = {"content": top[0]["token"]}
            logprobs = {"content": [{**top[0], "top_logprobs": top}]}
        else:
            with self.lock, torch.no_grad():
                out = self.lm.generate(
                    torch.tensor([ids]),
                    max_new_tokens=body["max_tokens"],
                    do_sample=False,
                    pad_token_id=0,
                )
            new = self.tokenizer.decode(out[0, len(ids) :], skip_special_tokens=True)
            reply, logprobs = {"content": new}, None
        choice = {"index": 0, "message": {"role": "assistant", **reply}, "logprobs": logprobs}
        return {"object": "chat.completion", "model": body["model"], "choices": [choice]}


def _handler(stub: StubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def _send(
            self,
            status: int,
            payload: Any,
            headers: dict[str, str] | None = None,
            kind: str = "application/json",
        ) -> None:
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            with contextlib.suppress(OSError):  # the client gave up (a timeout)
                self.wfile.write(data)

        def _authorized(self) -> bool:
            if stub.api_key and self.headers.get("Authorization") != f"Bearer {stub.api_key}":
                self._send(401, {"error": "Unauthorized"})
                return False
            return True

        def do_GET(self) -> None:  # noqa: N802
            if self.path != "/v1/models":
                return self._send(404, {"detail": "Not Found"})
            if self._authorized():
                owner = "openai" if stub.strict else "vllm"  # vLLM's protocol, or OpenAI's only
                data = [
                    {"id": stub.name, "root": stub.model_dir, "parent": None, "owned_by": owner}
                ]
                data += [
                    {"id": n, "root": p, "parent": stub.name} for n, p in stub.adapters.items()
                ]
                self._send(200, {"object": "list", "data": data})

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if not self._authorized():
                return None
            if self.path == "/tokenize":
                ids = stub.tokenizer(body["prompt"], add_special_tokens=False)["input_ids"]
                return self._send(200, {"count": len(ids), "tokens": ids})
            if self.path == "/v1/load_lora_adapter" and stub.load_adapters:
                stub.adapters[body["lora_name"]] = body["lora_path"]
                return self._send(200, b"Success: LoRA adapter added.", kind="text/plain")
            if self.path not in ("/v1/completions", "/v1/chat/completions"):
                return self._send(404, {"detail": "Not Found"})
            stub.bodies.append(body)
            stub.headers.append(self.headers.get("Authorization"))
            unknown = sorted(set(body) - OPENAI_FIELDS) if stub.strict else []
            if unknown:
                message = f"Unrecognized request argument supplied: {unknown[0]}"
                return self._send(400, {"error": {"message": message, "type": "invalid_request"}})
            names = {stub.name, *stub.adapters}
            if body.get("model") not in names:
                message = f"The model `{body.get('model')}` does not exist."
                return self._send(404, {"error": {"message": message, "type": "NotFoundError"}})
            fault = "500" if stub.fail_always else (stub.faults.popleft() if stub.faults else "")
            if fault in ("429", "500", "503"):
                status = int(fault)
                headers = {"Retry-After": "0"} if status == 429 else {}
                error = {"error": {"message": f"injected {status}", "code": status}}
                return self._send(status, error, headers)
            if fault == "drop":  # close the connection without an answer
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return None
            if fault == "malformed":
                return self._send(200, b'{"choices": [{"index": 0, "logpro')
            if fault == "half":  # valid JSON, but the log-probs left out
                answer = stub.complete(body)
                for choice in answer["choices"]:
                    choice["logprobs"] = None
                return self._send(200, answer)
            if fault == "slow":
                time.sleep(stub.slow_s)
            chat = self.path == "/v1/chat/completions"
            self._send(200, stub.chat(body) if chat else stub.complete(body))

    return Handler
