"""What the served engine is set up from: its options (:class:`OpenAIOptions`, the engine's flags
and recipe keys), the client they make (:func:`server_client`: where the API key comes from), and
what it learns from the server at start -- the models it lists (:func:`listed_models`), the name
requests go to (:func:`served_name`), whether the server's tokenizer splits text as the local one
does (:func:`check_tokenizer`), and each adapter's served name: one the server was started with
(:func:`started_adapters`), else one loaded at run time (:func:`load_adapter`)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from scd.config.engine import EngineSpec
from scd.config.options import above_zero, http_url, non_negative, option, positive
from scd.errors import InputError
from scd.eval.engines.client import Malformed, ServerClient

__all__ = [
    "DEFAULT_KEY_ENV",
    "PROBE_TEXT",
    "OpenAIOptions",
    "check_tokenizer",
    "default_key_env",
    "listed_models",
    "load_adapter",
    "served_name",
    "server_client",
    "started_adapters",
]

DEFAULT_KEY_ENV = "OPENAI_API_KEY"
PROBE_TEXT = "Would you be willing to work next to them? Yes or no."


def default_key_env(base_url: str | None) -> str | None:
    """OpenAI's own key goes to OpenAI's API only; any other server gets a key only from a
    variable named with ``--api-key-env``."""
    from urllib.parse import urlsplit

    return DEFAULT_KEY_ENV if urlsplit(base_url or "").hostname == "api.openai.com" else None


def _models(answer: Any) -> list[dict[str, Any]]:
    """``/v1/models``' entries that have a name (others are ignored)."""
    data = answer["data"]
    if not isinstance(data, list):
        raise Malformed("no model list")
    return [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]


@dataclass
class OpenAIOptions(EngineSpec):
    """A served model's options: where it is and how to ask it (pinned: another server may serve
    another model under the same name), how hard to try (speed)."""

    base_url: str | None = option(
        None, "the server's OpenAI API, e.g. http://127.0.0.1:8000/v1", check=http_url
    )
    served_model: str | None = option(
        None, "the model's name on the server (default: the one base model it lists)"
    )
    api: Literal["completions", "chat"] | None = option(
        None,
        "completions: token-id prompts, exact option log-probs (vllm serve); chat: "
        "conversations as text (hosted chat APIs): generate mode, or the first answer token's "
        "top-20 log-probs (one-word options; scd eval bias) (default: completions)",
    )
    score_via: Literal["token_ids", "echo"] | None = option(
        None,
        "how the server gives option log-probs: token_ids (vLLM's logprob_token_ids, "
        "reads its prefix cache) or echo (echo + logprobs of prompt and option, one request per "
        "option) (default: token_ids)",
    )
    api_key_env: str | None = option(
        None,
        "environment variable holding the API key, sent as a bearer token and nowhere "
        "else (default: OPENAI_API_KEY for api.openai.com, no key elsewhere)",
        speed=True,
    )
    concurrency: int | None = option(
        None, "requests in flight at once (default: 8)", check=positive, speed=True
    )
    request_timeout: float | None = option(
        None, "seconds to wait for one answer (default: 300)", check=above_zero, speed=True
    )
    retries: int | None = option(
        None,
        "tries again after a timeout, a dropped connection, a malformed answer, 429 or 5xx, "
        "backing off (default: 5)",
        check=non_negative,
        speed=True,
    )

    def problems(self) -> Iterator[tuple[str, str]]:
        yield from super().problems()
        if not self.base_url:
            yield "base_url", "the server's API is needed, e.g. http://127.0.0.1:8000/v1"

    def describe(self, ran: dict[str, Any]) -> str:  # the server decides dtype and batching
        text = f"openai: `{self.served_model or 'the one model'}` served at {self.base_url}"
        if self.api == "chat":
            return text + ", chat API (options: the first reply token's top-20 log-probs)"
        return text + f", option log-probs via {self.score_via or 'token_ids'}"


def server_client(spec: OpenAIOptions) -> ServerClient:
    """The client of the server ``spec`` (checked) names, with its key
    (from ``api_key_env``, else :func:`default_key_env`) and its defaults filled in."""
    key_env = spec.api_key_env or default_key_env(spec.base_url)
    key = os.environ.get(key_env) or None if key_env else None
    hint = f"the key is read from ${key_env}" if key_env else "no key sent: --api-key-env VAR"
    return ServerClient(
        spec.base_url,
        api_key=key,
        key_hint=hint,
        timeout=spec.request_timeout or 300.0,
        retries=5 if spec.retries is None else spec.retries,
        concurrency=spec.concurrency or 8,
    )


def listed_models(client: ServerClient) -> list[dict[str, Any]]:
    """The models the server lists (``/v1/models``), asked once: a server that does not answer
    fails the start."""
    return client.request("GET", "models", parse=_models, retry=False)


def served_name(listed: list[dict[str, Any]], asked: str | None, model: str, base_url: str) -> str:
    """The served name requests go to: ``asked`` where the server lists it, else the one base
    model it lists, else the base model named as ``model``.

    Raises:
        InputError: ``asked`` is not served, or it is None and several models are.
    """
    names = [m["id"] for m in listed]
    bases = [m["id"] for m in listed if not m.get("parent")]
    served = ", ".join(names[:12]) + (f", ... ({len(names)} in all)" if names[12:] else "")
    if asked is not None and asked in names:
        return asked
    if asked is None and len(bases) == 1:
        return bases[0]
    if asked is None and model in bases:
        return model
    served = served or "none"
    if asked is None:
        raise InputError(
            f"the server serves several models ({served}); name one", key="served_model"
        )
    raise InputError(
        f"the server at {base_url} does not serve it (it serves: {served})",
        key="served_model",
        value=asked,
    )


def started_adapters(listed: list[dict[str, Any]], name: str) -> dict[str, str]:
    """Adapter path -> served name, for the adapters of ``name`` the server was started with
    (scd's own, ``scd-...``, go by :func:`load_adapter`'s name)."""
    return {
        str(Path(m["root"]).resolve()): m["id"]
        for m in listed
        if m.get("parent") == name
        and isinstance(m.get("root"), str)
        and not m["id"].startswith("scd-")
    }


def check_tokenizer(client: ServerClient, name: str, tokenizer: Any) -> None:
    """Where the server tokenizes (vLLM's ``/tokenize``), it must split text as the local
    tokenizer does: the ids sent mean the same tokens.

    Raises:
        InputError: the two split :data:`PROBE_TEXT` differently.
    """
    body = {"model": name, "prompt": PROBE_TEXT, "add_special_tokens": False}
    theirs = client.request(
        "POST", "/tokenize", body, parse=lambda a: list(a["tokens"]), retry=False, missing=None
    )
    ours = list(tokenizer(PROBE_TEXT, add_special_tokens=False)["input_ids"])
    if theirs is not None and theirs != ours:
        raise InputError(
            "the server's tokenizer splits text differently from the local model's "
            f"({len(theirs)} vs {len(ours)} tokens for a probe): --model must name the "
            "served model",
            key="served_model",
            value=name,
        )


def load_adapter(client: ServerClient, listed: set[str], path: str) -> str:
    """The adapter's name on the server, loaded now unless it holds these weights already
    (``listed``: the names it served at start): the name is the path's and the weights' (size,
    time) fingerprint, so an adapter trained again at the same path is loaded again.

    Raises:
        InputError: the server cannot load adapters at run time.
    """
    stamps = [
        (f.name, f.stat().st_size, f.stat().st_mtime_ns)
        for f in sorted(Path(path).glob("adapter_model.*"))
    ]
    name = "scd-" + hashlib.sha256(repr((path, stamps)).encode()).hexdigest()[:12]
    if name in listed:
        return name
    body = {"lora_name": name, "lora_path": path}
    loaded = client.request(
        "POST", "load_lora_adapter", body, parse=lambda a: True, retry=False, missing=False
    )
    if not loaded:
        raise InputError(
            "the server does not serve this adapter: start it with --enable-lora "
            f"--lora-modules NAME={path} (or let it load adapters: "
            "VLLM_ALLOW_RUNTIME_LORA_UPDATING=1)",
            key="adapter",
            value=path,
        )
    return name
