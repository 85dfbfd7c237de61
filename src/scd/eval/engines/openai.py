"""A model behind an OpenAI-compatible server (``vllm serve``, or any server whose
``/v1/completions`` takes token-id prompts) as an engine: ``--backend openai --base-url URL``.

scd formats and tokenizes locally, as for every engine (the ``model`` argument names the model's
tokenizer and chat template), and sends token ids, so the server scores exactly the tokens the
in-process engines score.

Scoring (``score_via``):

- ``token_ids`` (default): vLLM's ``logprob_token_ids`` -- one generated position
  (``max_tokens=1``) with the exact full-vocabulary log-probabilities of chosen ids; the same
  chained prefix requests as :mod:`~scd.eval.engines.vllm` (prompt + ``o[:i]`` asks for ``o[i]``,
  shared prefixes asked once), which read the server's prefix cache. Prefixes that ask for the
  same ids go in one request (``prompt`` a list of token lists).
- ``echo``: the legacy completions protocol -- prompt + option sent with ``echo`` and
  ``logprobs``; the option's positions of ``logprobs.token_logprobs`` are summed. One request
  per option, no prefix cache (vLLM computes it through ``prompt_logprobs``, which its CPU build
  cannot combine with LoRA).

At start the engine asks ``/v1/models`` (the served name; adapters by their path), checks the
server's tokenizer against the local one where the server has ``/tokenize`` (vLLM), and sends one
probe of the scoring protocol; a server that ignores it is refused when scores are asked for,
before anything is recorded. Generation (``generate``) is greedy completion of the token ids.

Adapters: a LoRA adapter is evaluated under the name the server serves it by -- one it lists
with the adapter's path (``vllm serve ... --enable-lora --lora-modules NAME=PATH``), else loaded
at run time (``/v1/load_lora_adapter``, vLLM with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=1``).

``api: chat`` (hosted chat APIs, which take no token ids and give no prompt log-probabilities):
the conversation as text to ``/v1/chat/completions`` -- generate mode, or the first reply
token's top log-probabilities for one-word options (:mod:`~scd.eval.engines.chat_api`), only for
requests that carry their conversation (``scd eval bias``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from scd.config.engine import EngineSpec, engine_spec
from scd.config.options import above_zero, http_url, non_negative, option, positive
from scd.errors import InputError
from scd.eval.engines import ChoiceRequest, next_token_reads, require_adapter, summed_options
from scd.eval.engines.chat_api import TOP_LOGPROBS, chat_body, option_logprobs, reply_text
from scd.eval.engines.client import Malformed, ServerClient, ServerRefused
from scd.eval.engines.completions_api import (
    choices,
    echo_body,
    echo_parser,
    generate_body,
    ids_body,
    ids_parser,
)

__all__ = ["DEFAULT_KEY_ENV", "PROMPTS_PER_REQUEST", "OpenAIEngine", "OpenAIOptions"]

DEFAULT_KEY_ENV = "OPENAI_API_KEY"
PROMPTS_PER_REQUEST = 16  # token lists in one completions request (vLLM takes up to 1024)
PROBE_TEXT = "Would you be willing to work next to them? Yes or no."


def _default_key_env(base_url: str | None) -> str | None:
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


class OpenAIEngine:
    """A served model behind the engine interface (see the module docstring)."""

    help = "a model behind an OpenAI-compatible server (vllm serve, ...) at --base-url"
    Options = OpenAIOptions
    name = "openai"
    model_kinds = ("causal",)

    def __init__(
        self,
        model: str,
        spec: EngineSpec | None = None,
        *,
        tokenizer: Any = None,
        adapters: Sequence[str] = (),
    ) -> None:
        spec = (spec or engine_spec("openai")).check()
        key_env = spec.api_key_env or _default_key_env(spec.base_url)
        key = os.environ.get(key_env) or None if key_env else None
        hint = f"the key is read from ${key_env}" if key_env else "no key sent: --api-key-env VAR"
        self.client = ServerClient(
            spec.base_url,
            api_key=key,
            key_hint=hint,
            timeout=spec.request_timeout or 300.0,
            retries=5 if spec.retries is None else spec.retries,
            concurrency=spec.concurrency or 8,
        )
        self.score_via = spec.score_via or "token_ids"
        self.api = spec.api or "completions"
        for path in adapters:
            require_adapter(path)
        listed = self.client.request("GET", "models", parse=_models, retry=False)
        self.name = self._served_name(listed, spec.served_model, model)
        self.vllm = any(m.get("owned_by") == "vllm" for m in listed)  # takes vLLM's extensions
        self.listed = {m["id"] for m in listed}
        self.adapter_names = {  # modules the server was started with (scd's own: by name)
            str(Path(m["root"]).resolve()): m["id"]
            for m in listed
            if m.get("parent") == self.name
            and isinstance(m.get("root"), str)
            and not m["id"].startswith("scd-")
        }
        self.model = self.name  # the name requests go to: the base or an adapter
        self.tokenizer = tokenizer
        if tokenizer is not None and self.api == "completions" and self.vllm:
            self._check_tokenizer(tokenizer)
        self.scoring_problem = self._probe()

    def _served_name(self, listed: list[dict[str, Any]], asked: str | None, model: str) -> str:
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
            f"the server at {self.client.base_url} does not serve it (it serves: {served})",
            key="served_model",
            value=asked,
        )

    def _check_tokenizer(self, tokenizer: Any) -> None:
        """Where the server tokenizes (vLLM's ``/tokenize``), it must split text as the local
        tokenizer does: the ids sent mean the same tokens."""
        body = {"model": self.name, "prompt": PROBE_TEXT, "add_special_tokens": False}
        theirs = self.client.request(
            "POST", "/tokenize", body, parse=lambda a: list(a["tokens"]), retry=False, missing=None
        )
        ours = list(tokenizer(PROBE_TEXT, add_special_tokens=False)["input_ids"])
        if theirs is not None and theirs != ours:
            raise InputError(
                "the server's tokenizer splits text differently from the local model's "
                f"({len(theirs)} vs {len(ours)} tokens for a probe): --model must name the "
                "served model",
                key="served_model",
                value=self.name,
            )

    def _probe(self) -> str | None:
        """Why the server cannot score options the ``score_via`` way (None: it can)."""
        ids = list(range(10, 16))
        if self.tokenizer is not None:
            ids = list(self.tokenizer(PROBE_TEXT, add_special_tokens=False)["input_ids"])
        try:
            if self.api == "chat":
                probe = ChoiceRequest((), (), (("user", PROBE_TEXT),), ("Yes", "No"))
                self._chat_scores([probe], probe=True)
            elif self.score_via == "token_ids":
                self._token_logprobs([(tuple(ids[:-2]), ids[-2:])], probe=True)
            else:
                self._echo_logprobs([(tuple(ids[:-2]), tuple(ids[-2:]))], probe=True)
        except ServerRefused as err:  # refused or ignored; a server that failed raises on
            if self.api == "chat":
                return (
                    f"the server gives no top log-probs in chat completions ({err.detail}); "
                    "use --mode generate"
                )
            other = "echo" if self.score_via == "token_ids" else "token_ids"
            return (
                f"the server gives no option log-probs via {self.score_via} ({err.detail}); "
                f"try --score-via {other}, or --mode generate"
            )
        return None

    def use_adapter(self, adapter: str | None) -> None:
        """Send the next requests to ``adapter``'s served name (None: the base model)."""
        if adapter is None:
            self.model = self.name
            return
        require_adapter(adapter)
        path = str(Path(adapter).resolve())
        if path not in self.adapter_names:
            self.adapter_names[path] = self._load_adapter(path)
        self.model = self.adapter_names[path]

    def _load_adapter(self, path: str) -> str:
        """The adapter's name on the server, loaded now unless it holds these weights already:
        the name is the path's and the weights' (size, time) fingerprint, so an adapter trained
        again at the same path is loaded again."""
        stamps = [
            (f.name, f.stat().st_size, f.stat().st_mtime_ns)
            for f in sorted(Path(path).glob("adapter_model.*"))
        ]
        name = "scd-" + hashlib.sha256(repr((path, stamps)).encode()).hexdigest()[:12]
        if name in self.listed:
            return name
        body = {"lora_name": name, "lora_path": path}
        loaded = self.client.request(
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

    def score(self, requests: list[ChoiceRequest]) -> list[list[float]]:
        """Summed option log-probabilities per request (see the module docstring)."""
        if self.scoring_problem:
            raise InputError(self.scoring_problem, key="base_url", value=self.client.base_url)
        if self.api == "chat":
            return self._chat_scores(requests)
        if self.score_via == "echo":
            pairs = list({(r.prompt_ids, o) for r in requests for o in r.option_ids})
            found = dict(zip(pairs, self._echo_logprobs(pairs)))
            return [[found[r.prompt_ids, o] for o in r.option_ids] for r in requests]
        reads = next_token_reads(requests)
        return summed_options(requests, reads, self._token_logprobs(reads))

    def _token_logprobs(
        self, asks: list[tuple[tuple[int, ...], list[int]]], probe: bool = False
    ) -> list[list[float]]:
        """For each (prefix, ids): the log-probability of each id after the prefix."""
        groups: dict[tuple[int, ...], list[int]] = {}  # ids asked -> indices into asks
        for i, (_, tokens) in enumerate(asks):
            groups.setdefault(tuple(tokens), []).append(i)
        batches = [
            (tokens, idx[lo : lo + PROMPTS_PER_REQUEST])
            for tokens, idx in groups.items()
            for lo in range(0, len(idx), PROMPTS_PER_REQUEST)
        ]

        bodies = [ids_body(self.model, [asks[i][0] for i in idx], t) for t, idx in batches]
        parsers = [ids_parser(tokens, len(idx)) for tokens, idx in batches]
        answers = self._post_each(bodies, parsers, probe)
        found: list[Any] = [None] * len(asks)
        for (_, idx), values in zip(batches, answers):
            for i, v in zip(idx, values):
                found[i] = v
        return found

    def _echo_logprobs(
        self, pairs: list[tuple[tuple[int, ...], tuple[int, ...]]], probe: bool = False
    ) -> list[float]:
        """For each (prompt, option): the option's summed log-probability after the prompt,
        from the server's echo of prompt + option."""

        bodies = [echo_body(self.model, p, o) for p, o in pairs]
        return self._post_each(bodies, [echo_parser(p, o) for p, o in pairs], probe)

    def _chat_scores(self, requests: list[ChoiceRequest], probe: bool = False) -> list[list]:
        """Each option's log-probability as the first reply token of a chat completion (None:
        not among the top :data:`TOP_LOGPROBS`)."""
        if any(not r.messages or not r.options for r in requests):
            raise InputError(
                "a chat API scores only what scd eval bias asks (a conversation "
                "and one-word options)",
                key="api",
                value="chat",
            )
        for word in {o for r in requests for o in r.options}:
            if len(word.split()) != 1:
                raise InputError(
                    f"a chat API's top log-probs score one-word options, not "
                    f"{word!r}: use --mode generate",
                    key="api",
                    value="chat",
                )
        bodies = [chat_body(self.model, r.messages, 1, TOP_LOGPROBS) for r in requests]
        parsers = [(lambda o: lambda a: option_logprobs(a, o))(r.options) for r in requests]
        return self._post_each(bodies, parsers, probe, "chat/completions")

    def _post_each(
        self, bodies: list[dict], parsers: list[Any], probe: bool, path: str = "completions"
    ) -> list[Any]:
        """POST each body to ``path``, each answer read by its own parser; ``probe``: an answer
        the parser refuses is not retried (the server may not know the protocol)."""
        if not probe:
            return self.client.post_all(path, list(zip(bodies, parsers)))
        return [
            self.client.request("POST", path, b, parse=p, retry_malformed=False)
            for b, p in zip(bodies, parsers)
        ]

    def generate(
        self, prompt_ids: list[list[int]], max_new_tokens: int, *, messages: Any = None
    ) -> list[str]:
        """Greedy continuations (:func:`~scd.eval.engines.completions_api.generate_body`);
        through a chat API, replies to ``messages``."""
        if self.api == "chat":
            if messages is None:
                raise InputError("a chat API needs the conversations", key="api", value="chat")
            bodies = [chat_body(self.model, m, max_new_tokens) for m in messages]
            return self._post_each(bodies, [reply_text] * len(bodies), False, "chat/completions")
        batches = [
            prompt_ids[lo : lo + PROMPTS_PER_REQUEST]
            for lo in range(0, len(prompt_ids), PROMPTS_PER_REQUEST)
        ]
        bodies = [generate_body(self.model, b, max_new_tokens, self.vllm) for b in batches]
        parsers = [
            (lambda n: lambda a: [c["text"].strip() for c in choices(a, n)])(len(b))
            for b in batches
        ]
        return [text for texts in self._post_each(bodies, parsers, False) for text in texts]

    def close(self) -> None:
        """Nothing to free: the model lives in the server."""
