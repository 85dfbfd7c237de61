"""XLNet as a masked LM, the way Mei et al. (2023) used XLNet-large in the fill-mask probe.

XLNet is a permutation LM: transformers has no ``fill-mask`` pipeline and no
``AutoModelForMaskedLM`` mapping for it, so the ``mlm`` probe predicts its masked word here, as
the authors' ``xlnet_predict_topK`` (``helper_functions.py`` of Mooniem/MLMs_bias_stigmas) and
the ``XLNetLMHeadModel`` documentation do: the statement is tokenized *without* special tokens
(as the authors did, so no ``<sep> <cls>`` is appended), ``perm_mask[:, :, t] = 1`` so that no
token sees the ``<mask>`` position ``t``, ``target_mapping[:, 0, t] = 1`` so that the query
stream predicts ``t``; a softmax over the vocabulary gives the scores and the ``top_k`` of them
come back as the pipeline returns them (``score``, ``token``, ``token_str`` =
``tokenizer.decode([token])``), for the same lexicon scoring as every other masked LM.

Batches are padded (XLNet's tokenizer pads on the left) and the padding hidden by the attention
mask; XLNet's positions are relative, so a padded row scores as it does alone (tested against
one-sentence-at-a-time predictions).

BERTweet (``vinai/bertweet-*``) needs nothing of its own: its tokenizer's ``normalization=True``
only rewrites URLs, ``@user`` mentions and emoji, and the SDS statements have none (plain ASCII
words, commas and full stops), so the authors' fill-mask pipeline with the default tokenizer
is what the probe runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scd.errors import InputError

__all__ = ["XLNET_HEAD", "is_xlnet", "xlnet_fill_mask"]

XLNET_HEAD = "XLNetLMHeadModel"  # the architecture of the pretrained XLNet checkpoints


def is_xlnet(config: Any) -> bool:
    """Whether a model config is an XLNet LM (scored by :func:`xlnet_fill_mask`, not by the
    ``fill-mask`` pipeline)."""
    archs = getattr(config, "architectures", None) or []
    if XLNET_HEAD in archs:
        return True
    classifier = any(a.endswith("ForSequenceClassification") for a in archs)
    return getattr(config, "model_type", None) == "xlnet" and not classifier


def xlnet_fill_mask(
    model: Any, tokenizer: Any, texts: Sequence[str], top_k: int, batch_size: int
) -> list[list[dict[str, Any]]]:
    """The ``top_k`` predictions for the one mask token of each text, best first, as the
    ``fill-mask`` pipeline returns them (module docstring).

    Raises:
        InputError: a text does not tokenize to exactly one mask token.
    """
    import torch

    out: list[list[dict[str, Any]]] = []
    device = next(model.parameters()).device
    mask_id = tokenizer.mask_token_id
    with torch.inference_mode():
        for lo in range(0, len(texts), batch_size):
            part = list(texts[lo : lo + batch_size])
            enc = tokenizer(part, add_special_tokens=False, padding=True, return_tensors="pt")
            ids, attn = enc["input_ids"], enc["attention_mask"]
            is_mask = ids == mask_id
            counts = is_mask.sum(1).tolist()
            if bad := [n for n, c in enumerate(counts) if c != 1]:
                raise InputError(
                    f"expected one {tokenizer.mask_token} token, found {counts[bad[0]]}",
                    key="prompt",
                    value=part[bad[0]],
                )
            rows, width = torch.arange(len(part)), ids.shape[1]
            target = is_mask.int().argmax(1)
            perm = torch.zeros((len(part), width, width))
            perm[rows, :, target] = 1.0  # no token sees the target
            mapping = torch.zeros((len(part), 1, width))
            mapping[rows, 0, target] = 1.0  # the one prediction: the target
            logits = model(
                input_ids=ids.to(device),
                attention_mask=attn.to(device),
                perm_mask=perm.to(device),
                target_mapping=mapping.to(device),
                use_mems=False,
            ).logits[:, 0]
            probs = torch.softmax(logits.float(), dim=-1)
            values, tokens = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
            for v, t in zip(values.tolist(), tokens.tolist()):
                out.append(
                    [
                        {"score": s, "token": i, "token_str": tokenizer.decode([i])}
                        for s, i in zip(v, t)
                    ]
                )
    return out
