"""The planted-bias toy model's tokenizer (:mod:`scd.models.toy`): word level, trained on the
toy's prompts, so every option ("Yes", "No", "Likely", ...) is one token whatever precedes it;
a chat template of its own; and words that a benchmark's options need, added to a trained toy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["CHAT_TEMPLATE", "MAX_POSITIONS", "SPECIAL_TOKENS", "add_words", "word_tokenizer"]

SPECIAL_TOKENS = ("<s>", "</s>", "<pad>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>")
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] == 'system' %}<|system|> {{ m['content'] }} "
    "{% elif m['role'] == 'user' %}<|user|> {{ m['content'] }} "
    "{% elif m['role'] == 'assistant' %}<|assistant|> {{ m['content'] }} {{ eos_token }} "
    "{% else %}{{ raise_exception('unknown role: ' + m['role']) }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
MAX_POSITIONS = 256  # the model's positions, and the tokenizer's max length


def word_tokenizer(corpus: list[str]) -> Any:
    """A word-level tokenizer trained on ``corpus`` with the chat template set."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()  # words and runs of punctuation
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)  # tokens joined by spaces
    tok.train_from_iterator(corpus, trainers.WordLevelTrainer(special_tokens=list(SPECIAL_TOKENS)))
    return _wrapped(tok)


def _wrapped(tok: Any) -> Any:
    """``tok`` (a ``tokenizers.Tokenizer``) as transformers' tokenizer, the chat template set."""
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        additional_special_tokens=list(SPECIAL_TOKENS[4:]),
        clean_up_tokenization_spaces=True,  # "I ' ve" -> "I've" when decoding
        model_max_length=MAX_POSITIONS,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def add_words(model: Any, tokenizer: Any, words: Sequence[str], seed: int) -> Any:
    """The tokenizer with each piece of ``words`` that it lacks as a token of its own, after
    its vocabulary (whose ids stay), and the trained ``model``'s embeddings and output layer
    grown to match, the new rows drawn (from ``seed``) around the trained ones' mean, as
    transformers grows them: tokens that no training row holds."""
    from tokenizers import Tokenizer, models

    tok = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    vocab = tok.get_vocab()
    pieces = (p for w in words for p, _ in tok.pre_tokenizer.pre_tokenize_str(w))
    extra = [p for p in dict.fromkeys(pieces) if p not in vocab]
    if not extra:
        return tokenizer
    vocab.update({p: i for i, p in enumerate(extra, start=len(vocab))})
    tok.model = models.WordLevel(vocab, unk_token="<unk>")
    from transformers.utils import logging as hf_logging

    torch.manual_seed(seed)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # else two notices of how the rows are drawn
    try:
        model.resize_token_embeddings(len(vocab), mean_resizing=True)
    finally:
        hf_logging.set_verbosity(verbosity)
    return _wrapped(tok)
