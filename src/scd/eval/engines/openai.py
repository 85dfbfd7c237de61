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
server's tokenizer against the local one where the server has ``/tokenize`` (vLLM) -- these
checks, and the engine's options, are :mod:`~scd.eval.engines.openai_setup` -- and sends one
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

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scd.config.engine import EngineSpec, engine_spec
from scd.errors import InputError
from scd.eval.engines import ChoiceRequest, next_token_reads, require_adapter, summed_options
from scd.eval.engines.chat_api import TOP_LOGPROBS, chat_body, option_logprobs, reply_text
from scd.eval.engines.client import ServerRefused
from scd.eval.engines.completions_api import (
    choices,
    echo_body,
    echo_parser,
    generate_body,
    ids_body,
    ids_parser,
)
from scd.eval.engines.openai_setup import (
    PROBE_TEXT,
    OpenAIOptions,
    check_tokenizer,
    listed_models,
    load_adapter,
    served_name,
    server_client,
    started_adapters,
)

__all__ = ["PROMPTS_PER_REQUEST", "OpenAIEngine"]

PROMPTS_PER_REQUEST = 16  # token lists in one completions request (vLLM takes up to 1024)


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
        self.client = server_client(spec)
        self.score_via = spec.score_via or "token_ids"
        self.api = spec.api or "completions"
        for path in adapters:
            require_adapter(path)
        listed = listed_models(self.client)
        self.name = served_name(listed, spec.served_model, model, self.client.base_url)
        self.vllm = any(m.get("owned_by") == "vllm" for m in listed)  # takes vLLM's extensions
        self.listed = {m["id"] for m in listed}
        self.adapter_names = started_adapters(listed, self.name)  # adapter path -> served name
        self.model = self.name  # the name requests go to: the base or an adapter
        self.tokenizer = tokenizer
        if tokenizer is not None and self.api == "completions" and self.vllm:
            check_tokenizer(self.client, self.name, tokenizer)
        self.scoring_problem = self._probe()

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
            self.adapter_names[path] = load_adapter(self.client, self.listed, path)
        self.model = self.adapter_names[path]

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
