"""Evaluation protocols: how a contact prompt is put to a model and how its answer is chosen.

A protocol is data: a system prompt, a user-text template, a wrapping (the model's own chat
template, or the text the SCD paper's code wrote by hand for every model) and a scoring rule
over each option's token log-probabilities:

- ``sum``: the option's log-probability (its tokens' log-probabilities summed) -- scd's rule;
- ``mean``: their mean per token -- CAPPr's rule (``cappr.huggingface.classify.predict``), which
  the paper's code used;
- ``bytes``: the sum divided by the option's length in UTF-8 bytes (lm-evaluation-harness's
  ``acc_norm``, which divides by characters; the same for these ASCII options).

The rule matters where the options differ in token count (SmolLM2: "Likely" 3 tokens, "Unlikely"
2). Shipped protocols (:data:`PROTOCOLS`):

=================  ===============================================================  ======
name               text                                                             rule
=================  ===============================================================  ======
``scd``            the model's chat template; user: "{prompt} {instruction}"; the   sum
                   engine's ``system_prompt`` (default none); an option as the
                   template writes the assistant's reply
``paper``          the paper's ``format_prompt(instruction, input)`` text,          mean
                   character for character, for every model (Llama 2, Yi, Tulu,
                   NousHermes alike), tokenized as CAPPr tokenizes a prompt (the
                   tokenizer's own BOS); each option tokenized on its own, no BOS,
                   right after it (CAPPr, ``end_of_prompt=""``)
``paper-verbatim`` what the paper's code ran: ``cache_model(PREFIX)`` and then         mean
                   ``predict(format_prompt(...))`` on the cached model -- PREFIX's
                   tokens (the tokenizer's BOS included), then the whole text again
                   without a BOS, after a space on tokenizers that need one (CAPPr's
                   ``start_of_prompt`` in a cached model: BPE, not SentencePiece)
``paper-chat``     the paper's system prompt and user text as typed, through the     mean
                   model's own chat template: what a port to other models would do
=================  ===============================================================  ======

The paper's text (its ``gen_cappr.py``) is kept with every quirk, since each moves option
log-probabilities (by up to ~0.45 nats on SmolLM2): it opens with a literal ``<s>`` (on Llama 2 a
second BOS after the tokenizer's own; ``<``, ``s``, ``>`` elsewhere); its system prompt is Llama
2's default as the paper typed it, two spaces in "while being safe.  Your"; and its instruction
"Choose between Yes and No." goes into "{instruction}. Answer", which reads "No.. Answer".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from scd.errors import InputError

__all__ = [
    "PAPER_PREFIX",
    "PAPER_SYSTEM_PROMPT",
    "PROTOCOLS",
    "RULES",
    "PromptProtocol",
    "choose",
    "get_protocol",
    "needs_prepended_space",
    "paper_text",
    "training_protocol",
]

# Llama 2's default system prompt as the paper's code typed it (two spaces after "safe.")
PAPER_SYSTEM_PROMPT = (
    "You are a helpful, respectful and honest assistant. Always answer as helpfully as possible, "
    "while being safe.  Your answers should not include any harmful, unethical, racist, sexist, "
    "toxic, dangerous, or illegal content. Please ensure that your responses are socially "
    "unbiased and positive in nature.\n\nIf a question does not make any sense, or is not "
    "factually coherent, explain why instead of answering something not correct. If you don't "
    "know the answer to a question, please don't share false information."
)
# the paper's PREFIX and format_prompt, as its code wrote them
PAPER_PREFIX = f"<s>[INST] <<SYS>>\n{PAPER_SYSTEM_PROMPT}\n<</SYS>>\n\n Follow the instruction:"
PAPER_FORMAT = (
    "{prefix} {instruction}. Answer in one word. \n Question: {input} \n Answer:\n[/INST]\n"
)
# paper-chat's user turn: the text format_prompt puts between the system block and [/INST]
PAPER_USER = (
    "Follow the instruction: {instruction}. Answer in one word. \n Question: {prompt} \n Answer:\n"
)
Rule = Literal["sum", "mean", "bytes"]
RULES = ("sum", "mean", "bytes")


def paper_text(row: dict[str, Any]) -> str:
    """The paper's ``format_prompt(instruction, input)`` for a prompt row, character for
    character (its literal ``<s>``, its system prompt, "No.. Answer")."""
    return PAPER_FORMAT.format(
        prefix=PAPER_PREFIX, instruction=row["instruction"], input=row["prompt"]
    )


def needs_prepended_space(tokenizer: Any) -> bool:
    """Whether text that continues a cached prefix needs a space before it to tokenize as it
    would have inside the whole text -- CAPPr's test (``does_tokenizer_need_prepended_space``):
    BPE tokenizers do ("a b" is not "a" + "b"), SentencePiece ones (Llama 2) do not."""

    def ids(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    return ids("a b") != ids("a") + ids("b")


@dataclass(frozen=True)
class PromptProtocol:
    """One way to put a contact prompt to a model and choose its answer (module docstring)."""

    name: str
    user: str  # chat: the user turn ({prompt}, {instruction}); paper: unused (paper_text)
    system_prompt: str | None  # None: the engine's system_prompt (scd); else this one
    wrap: Literal["chat", "paper"]
    rule: Rule
    cached_prefix: bool = False  # paper-verbatim: PREFIX read first, as cache_model did

    def user_text(self, row: dict[str, Any]) -> str:
        """The user turn of a chat protocol; the whole text of a paper one."""
        if self.wrap == "paper":
            return paper_text(row)
        return self.user.format(prompt=row["prompt"], instruction=row["instruction"])

    def formatter(self, fmt: Any) -> Any:
        """The :class:`~scd.models.formatting.Formatter` that renders this protocol's chat text:
        ``fmt`` itself, or one with this protocol's system prompt."""
        from scd.models.formatting import Formatter

        if self.system_prompt is None or self.wrap != "chat":
            return fmt
        return Formatter(fmt.tokenizer, self.system_prompt)

    def prompt_ids(self, fmt: Any, rows: Sequence[dict[str, Any]]) -> list[list[int]]:
        """Token ids of each row's prompt, ending where the answer begins."""
        if self.wrap == "chat":
            return self.formatter(fmt).encode([self.user_text(r) for r in rows])
        tok = fmt.tokenizer
        texts = [paper_text(r) for r in rows]
        if not self.cached_prefix:  # as CAPPr tokenizes a prompt: the tokenizer's own BOS
            return [list(x) for x in tok(texts)["input_ids"]]
        head = list(tok(PAPER_PREFIX)["input_ids"])  # cache_model: with the tokenizer's BOS
        space = " " if needs_prepended_space(tok) else ""  # CAPPr's start_of_prompt
        tails = tok([space + t for t in texts], add_special_tokens=False)["input_ids"]
        return [head + list(x) for x in tails]

    def option_ids(self, fmt: Any, options: Sequence[str]) -> tuple[tuple[int, ...], ...]:
        """Token ids of each option after the prompt: the template's reply (chat), or the option
        tokenized on its own without special tokens (CAPPr)."""
        if self.wrap == "chat":
            return self.formatter(fmt).option_ids(options)
        ids = tuple(tuple(fmt.tokenizer(o, add_special_tokens=False)["input_ids"]) for o in options)
        if len(set(ids)) != len(ids) or not all(ids):
            raise InputError(f"options {list(options)} do not tokenize into distinct tokens")
        return ids


def choose(
    options: Sequence[str],
    logprobs: Sequence[float | None],
    option_ids: Sequence[Sequence[int]],
    rule: Rule = "sum",
) -> str | None:
    """The option of highest score under ``rule`` (the first on a tie); None where no option has
    a log-probability (a chat API's top log-probabilities hold none of them)."""
    scores = []
    for i, (option, lp) in enumerate(zip(options, logprobs)):
        if lp is None:
            continue
        size = {"sum": 1, "mean": len(option_ids[i]), "bytes": len(option.encode())}[rule]
        scores.append((i, lp / size))
    return options[max(scores, key=lambda s: s[1])[0]] if scores else None


PROTOCOLS = {
    p.name: p
    for p in (
        PromptProtocol("scd", "{prompt} {instruction}", None, "chat", "sum"),
        PromptProtocol("paper", PAPER_FORMAT, PAPER_SYSTEM_PROMPT, "paper", "mean"),
        PromptProtocol("paper-chat", PAPER_USER, PAPER_SYSTEM_PROMPT, "chat", "mean"),
        PromptProtocol("paper-verbatim", PAPER_FORMAT, PAPER_SYSTEM_PROMPT, "paper", "mean", True),
    )
}


def training_protocol(name: str) -> PromptProtocol:
    """The shipped protocol ``name`` if training can use its text: it goes through the model's
    chat template (``scd``, ``paper-chat``).

    Raises:
        InputError: another protocol (``paper`` writes Llama 2's text by hand and scores the
            options tokenized alone, which no chat-template training reproduces).
    """
    found = get_protocol(name)
    if found.wrap != "chat":
        raise InputError(
            "training goes through the model's chat template, so it can use the text of "
            "protocol scd or paper-chat (the paper's system prompt and wording), not the "
            "paper's hand-written Llama 2 text; score that with scd eval bias --protocol",
            key="protocol",
            value=name,
        )
    return found


def get_protocol(name: str) -> PromptProtocol:
    """The shipped protocol ``name``.

    Raises:
        InputError: no such protocol (naming the known ones).
    """
    if name not in PROTOCOLS:
        raise InputError(f"not a protocol ({', '.join(PROTOCOLS)})", key="protocol", value=name)
    return PROTOCOLS[name]
