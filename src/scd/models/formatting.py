"""Prompt formatting, option tokenization and answer parsing -- shared by every engine and by
training, so that the tokens a model is trained on are the tokens it is scored on.

**Chat models.** A prompt is one user message (after an optional system message), rendered by the
tokenizer's own chat template with its generation prompt and tokenized without adding special
tokens (the template writes BOS itself) -- exactly what ``apply_chat_template(tokenize=True)``
and TRL's ``SFTTrainer`` do. An option is scored as the template writes it as the assistant's
reply: the conversation ``[user, assistant: option]`` is rendered and tokenized as a whole (as
TRL does for a prompt/completion row), the prompt's tokens must be a prefix of it, and the
option's tokens are the reply's shortest prefix that decodes to the option ("▁Yes" after Llama
2's ``[/INST]``, "Yes" after Llama 3's header). What follows in the reply is the template's
end-of-turn (``</s>``, ``<|eot_id|>``, ``<|im_end|>\\n``); training puts the loss on exactly the
option tokens plus that end-of-turn (``tests/eval/test_real_templates.py`` checks it on TRL's
tokenized dataset for Llama 2, Llama 3.1, Qwen3 and SmolLM2).

**Thinking off.** Templates are rendered with ``enable_thinking=False`` (Qwen3 and its kind then
put an empty ``<think></think>`` block in the generation prompt, and the answer follows it); the
same keyword goes to TRL for training. Templates that do not know the keyword ignore it.

**System prompts.** ``system_prompt`` is put as a system message. A template that refuses the
system role (e.g. Gemma 2, Mistral v0.1) or silently drops it is an :class:`InputError`.

**Models without a chat template** (base models) get a plain format, documented here::

    [{system}\\n\\n]{user}\\nAnswer:

tokenized with the tokenizer's special tokens (BOS), and options are scored with a leading space
(" Yes"); training then uses the same text as prompt and " {answer}" + EOS as completion.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scd.errors import InputError, first_line

__all__ = [
    "PLAIN_FORMAT",
    "TEMPLATE_KWARGS",
    "Formatter",
    "load_tokenizer",
    "parse_answer",
]

PLAIN_FORMAT = "{user}\nAnswer:"
TEMPLATE_KWARGS = {"enable_thinking": False}  # Qwen3-style thinking off: scoring and training
_PROBE = "Is this a question?"


def load_tokenizer(model: str, adapter: str | None = None) -> Any:
    """Load the tokenizer of ``adapter`` (if it saved one) or of ``model``; no remote code."""
    from transformers import AutoTokenizer

    source = adapter if adapter and (Path(adapter) / "tokenizer_config.json").is_file() else model
    try:
        return AutoTokenizer.from_pretrained(source, trust_remote_code=False)
    except (OSError, ValueError) as err:
        raise InputError(
            "cannot load a tokenizer (a local model directory or a Hub id is expected): "
            + first_line(err),
            key="model",
            value=source,
        ) from None


class Formatter:
    """Formats prompts for one tokenizer and turns them into token ids (see the module doc)."""

    def __init__(self, tokenizer: Any, system_prompt: str | None = None) -> None:
        self.tokenizer = tokenizer
        self.system_prompt = system_prompt
        self.chat = bool(getattr(tokenizer, "chat_template", None))
        self._replies: dict[str, tuple[int, ...]] = {}
        if system_prompt and self.chat:
            self._check_system_role()

    @classmethod
    def of_rows(cls, tokenizer: Any, rows: list[dict[str, Any]]) -> Formatter:
        """The formatter of the conversation SFT rows were written in: their system prompt
        (an evaluation protocol's, e.g. ``paper-chat``'s; :func:`scd.data_gen.sft.write_sft`),
        or none. What checks or steers those rows must render the same conversation."""
        messages = rows[0]["prompt"] if rows else []
        system = next((m["content"] for m in messages if m["role"] == "system"), None)
        return cls(tokenizer, system)

    # -- text --------------------------------------------------------------------------------
    def messages(self, user: str, reply: str | None = None) -> list[dict[str, str]]:
        """The conversation of one prompt (and its reply): [system], user, [assistant]."""
        msgs = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        msgs.append({"role": "user", "content": user})
        if reply is not None:
            msgs.append({"role": "assistant", "content": reply})
        return msgs

    def conversation(self, user: str) -> tuple[tuple[str, str], ...]:
        """The conversation of one prompt as (role, content) pairs: what a chat API is sent."""
        return tuple((m["role"], m["content"]) for m in self.messages(user))

    def render(self, messages: list[dict[str, str]], generation_prompt: bool) -> str:
        """The chat template's text for ``messages`` (thinking off)."""
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation_prompt, **TEMPLATE_KWARGS
        )

    def _check_system_role(self) -> None:
        marker = self.system_prompt.strip()
        try:
            text = self.render(self.messages(_PROBE), True)
        except Exception as err:  # jinja's TemplateError from raise_exception(...)  # noqa: BLE001
            raise InputError(
                "the model's chat template does not take a system message "
                f"({str(err).strip()[:120]}); leave the system prompt out for this model",
                key="system_prompt",
            ) from None
        if marker not in text:
            raise InputError(
                "the model's chat template drops the system message; "
                "leave the system prompt out for this model",
                key="system_prompt",
            )

    def text(self, user: str) -> str:
        """The full prompt text, ending where the model's answer begins."""
        if self.chat:
            return self.render(self.messages(user), True)
        head = f"{self.system_prompt}\n\n" if self.system_prompt else ""
        return head + PLAIN_FORMAT.format(user=user)

    # -- tokens ------------------------------------------------------------------------------
    def encode(self, users: Sequence[str]) -> list[list[int]]:
        """Token ids of each formatted prompt (one BOS: the template's, or the tokenizer's)."""
        texts = [self.text(u) for u in users]
        return self.tokenizer(texts, add_special_tokens=not self.chat)["input_ids"]

    def exchange_texts(self, user: str, reply: str) -> tuple[str, str]:
        """(prompt text, prompt + reply text) of one exchange, rendered as training renders it."""
        prompt = self.text(user)
        if not self.chat:
            return prompt, f"{prompt} {reply}{self.tokenizer.eos_token or ''}"
        try:
            return prompt, self.render(self.messages(user, reply), False)
        except Exception as err:  # a template that refuses an assistant turn  # noqa: BLE001
            raise InputError(
                f"the model's chat template cannot render an assistant reply "
                f"({str(err).strip()[:120]}); its answers cannot be scored or trained"
            ) from None

    def reply_ids(self, option: str) -> tuple[int, ...]:
        """Token ids of ``option`` as the model writes it as its whole reply (no end-of-turn).

        The reply's tokens up to the end of the option's characters in the rendered text (found
        by the tokenizer's offsets, so ``<unk>`` tokens are fine); anything the template puts
        before the option (an empty think block) belongs to it.

        Raises:
            InputError: the template renders the prompt differently once a reply follows it, or
                the option does not end on a token boundary -- scoring would not match training.
        """
        if option in self._replies:
            return self._replies[option]
        prompt_text, full_text = self.exchange_texts(_PROBE, option)
        prompt_ids = self.encode([_PROBE])[0]
        enc = self.tokenizer(
            full_text, add_special_tokens=not self.chat, return_offsets_mapping=True
        )
        full_ids, offsets = enc["input_ids"], enc["offset_mapping"]
        n = len(prompt_ids)
        if full_ids[:n] != prompt_ids:  # both lists, from the same tokenizer
            raise InputError(
                "the model's chat template renders the prompt differently when a reply follows "
                f"it (...{self.tokenizer.decode(prompt_ids[-4:])!r} vs "
                f"...{self.tokenizer.decode(full_ids[n - 4 : n])!r}); option scores would not "
                "match what training teaches"
            )
        found = full_text.find(option.strip(), len(prompt_text))
        if not full_text.startswith(prompt_text) or found < 0:
            raise InputError(f"option {option!r}: not found in the chat template's reply")
        end = found + len(option.strip())
        k = n
        while k < len(full_ids) and offsets[k][0] < end:
            k += 1
        if k == n or offsets[k - 1][1] != end:
            raise InputError(
                f"option {option!r}: the reply {full_text[len(prompt_text) :]!r} does not end the "
                "option on a token boundary; it cannot be scored as it is trained"
            )
        self._replies[option] = tuple(full_ids[n:k])
        return self._replies[option]

    def option_ids(self, options: Sequence[str]) -> tuple[tuple[int, ...], ...]:
        """Token ids of each option as the model would write it after the prompt (cached)."""
        ids = tuple(self.reply_ids(o) for o in options)
        if len(set(ids)) != len(ids):
            raise InputError(f"options {list(options)} do not tokenize into distinct tokens")
        return ids

    # -- training rows -----------------------------------------------------------------------
    def sft_example(self, prompt: list[dict[str, str]], completion: list[dict[str, str]]) -> dict:
        """A TRL prompt/completion row for one conversational SFT row.

        Chat models keep the conversational row (TRL renders it with the same template and
        ``chat_template_kwargs``); plain-format models get the plain prompt text and
        ``" " + answer`` (TRL appends EOS), the same text :meth:`text` scores.
        """
        if self.chat:
            return {
                "prompt": prompt,
                "completion": completion,
                "chat_template_kwargs": dict(TEMPLATE_KWARGS),
            }
        users = [m["content"] for m in prompt if m["role"] == "user"]
        answer = " ".join(m["content"] for m in completion)
        return {"prompt": self.text("\n\n".join(users)), "completion": f" {answer}"}


def parse_answer(text: str, options: Sequence[str]) -> str | None:
    """The option a free-text answer gives: the earliest option found as a whole word.

    Case-insensitive ("yes." -> "Yes"); "Unlikely" does not count as "Likely". Returns None when
    no option appears (an unparsed answer).
    """
    best: tuple[int, str] | None = None
    for option in options:
        match = re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text, re.IGNORECASE)
        if match and (best is None or match.start() < best[0]):
            best = (match.start(), option)
    return best[1] if best else None
