"""The transformers engine: batched option scoring and greedy generation, CPU or GPU, PEFT adapters.

Option scoring: when every option is a single token, one forward pass per prompt gives all
options' log-probabilities at the last position; otherwise (real tokenizers split "Likely",
"Unlikely", "Mostly", "Rarely" and BBQ's answers into several tokens) the prompt runs once into a
KV cache shared by its options, and each option's token log-probabilities are summed. Batches
are formed from length-sorted requests; positions are computed from the attention mask, so the
padding side does not change a result (tests compare every path with a one-sequence forward).

Adapters: the base model is loaded once; :meth:`HFEngine.use_adapter` loads a PEFT adapter onto
it (unmerged) and switches between adapters, or runs the base with the adapter layers disabled.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from scd.config.engine import EVAL_BATCH_SIZE, EngineSpec, resolve_dtype
from scd.errors import InputError
from scd.eval.engines import ChoiceRequest, require_adapter

__all__ = ["HFEngine", "load_model"]


def _first_line(err: BaseException) -> str:
    """The most telling line of an error ("size mismatch for ..." rather than a heading)."""
    lines = [x.strip() for x in str(err).strip().splitlines() if x.strip()]
    telling = [x for x in lines if "mismatch" in x or "not found" in x.lower()]
    return (telling or lines or [type(err).__name__])[0]


def load_model(model: str, device: str, dtype: str) -> Any:
    """Load a causal LM through ``from_pretrained`` (no remote code), in eval mode."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the evaluation has its own progress bar

    torch_dtype = getattr(torch, resolve_dtype(dtype, device))
    try:
        lm = AutoModelForCausalLM.from_pretrained(model, dtype=torch_dtype, trust_remote_code=False)
    except (OSError, ValueError) as err:
        raise InputError(
            "cannot load a causal LM (a local model directory or a Hub id is "
            f"expected): {_first_line(err)}",
            key="model",
            value=model,
        ) from None
    return lm.to(device).eval()


class HFEngine:
    """Batched transformers inference behind the engine interface."""

    def __init__(
        self,
        model: str,
        spec: EngineSpec | None = None,
        *,
        tokenizer: Any = None,
        adapters: Sequence[str] = (),
        padding_side: str = "left",
    ) -> None:
        spec = (spec or EngineSpec()).check()
        self.device = spec.device or ("cuda" if torch.cuda.is_available() else "cpu")
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise InputError("no CUDA GPU is available here", key="device", value=self.device)
        if self.device == "mps" and not torch.backends.mps.is_available():
            raise InputError("no Apple GPU is available here", key="device", value="mps")
        batch_size = spec.batch_size or EVAL_BATCH_SIZE
        dtype = spec.dtype
        for path in adapters:
            require_adapter(path)
        self.model_name = model
        self.model = load_model(model, self.device, dtype)
        self.adapters: dict[str, str] = {}  # adapter path -> PEFT adapter name
        self.active: str | None = None
        self._loaded = 0
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.padding_side = padding_side
        pad = getattr(tokenizer, "pad_token_id", None)
        if pad is None:
            pad = getattr(tokenizer, "eos_token_id", None)
        self.pad_id = pad if pad is not None else 0

    def use_adapter(self, adapter: str | None) -> None:
        """Run the next calls through ``adapter`` (loaded once, unmerged), or the base model.

        Only the adapter in use is kept in memory: switching drops the others.
        """
        key = str(Path(adapter).resolve()) if adapter else None
        if key is not None and key not in self.adapters:
            from peft import PeftModel

            require_adapter(adapter)
            self._loaded += 1
            name = f"scd{self._loaded}"  # PEFT adapter names must not hold dots
            try:
                if isinstance(self.model, PeftModel):
                    self.model.load_adapter(adapter, adapter_name=name)
                else:
                    self.model = PeftModel.from_pretrained(self.model, adapter, adapter_name=name)
            except (RuntimeError, ValueError, KeyError) as err:
                raise InputError(
                    f"does not fit the model {self.model_name} ({_first_line(err)[:200]})",
                    key="adapter",
                    value=adapter,
                ) from None
            self.model.to(self.device).eval()
            self.adapters[key] = name
        if key is not None:
            self.model.set_adapter(self.adapters[key])
            for other, name in list(self.adapters.items()):
                if other != key:
                    self.model.delete_adapter(name)
                    del self.adapters[other]
        self.active = key

    def _active_model(self) -> contextlib.AbstractContextManager:
        """The base model when no adapter is in use: PEFT's layers switched off."""
        if self.active is None and self.adapters:
            return self.model.disable_adapter()
        return contextlib.nullcontext()

    def close(self) -> None:
        """Drop the model and free accelerator memory."""
        self.model = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def _pad(self, seqs: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            sl = slice(width - len(s), width) if self.padding_side == "left" else slice(0, len(s))
            ids[i, sl] = torch.tensor(s, dtype=torch.long)
            mask[i, sl] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        return ids.to(self.device), mask.to(self.device), positions.to(self.device)

    @torch.inference_mode()
    def _token_logprobs(self, seqs: list[list[int]], spans: list[int]) -> list[list[float]]:
        """Log-probabilities of the last ``spans[i]`` tokens of each sequence, per token."""
        ids, mask, positions = self._pad(seqs)
        keep = max(spans) + 1 if self.padding_side == "left" else 0
        out = self.model(
            input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=keep
        )
        logprobs = torch.log_softmax(out.logits.float(), dim=-1)
        width, kept = ids.shape[1], logprobs.shape[1]
        result = []
        for i, (seq, span) in enumerate(zip(seqs, spans)):
            end = width if self.padding_side == "left" else len(seq)  # one past the last token
            targets = seq[len(seq) - span :]
            rows = [end - span - 1 + j - (width - kept) for j in range(span)]
            result.append([logprobs[i, r, t].item() for r, t in zip(rows, targets)])
        return result

    def score(self, requests: list[ChoiceRequest]) -> list[list[float]]:
        """Summed option log-probabilities per request (see the module docstring)."""
        order = sorted(range(len(requests)), key=lambda i: -len(requests[i].prompt_ids))
        scores: list[Any] = [None] * len(requests)
        with self._active_model():
            self._score_batches(requests, order, scores)
        return scores

    def _score_batches(self, requests: list[ChoiceRequest], order: list[int], scores: list) -> None:
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            reqs = [requests[i] for i in batch]
            if all(len(o) == 1 for r in reqs for o in r.option_ids):
                values = self._score_single(reqs)
            elif min(len(r.prompt_ids) for r in reqs) > 1:
                values = self._score_shared_prefix(reqs)
            else:
                values = self._score_full(reqs)
            for i, v in zip(batch, values):
                scores[i] = v

    @torch.inference_mode()
    def _score_single(self, reqs: list[ChoiceRequest]) -> list[list[float]]:
        """Single-token options: one forward pass, all options read at the last position."""
        seqs = [list(r.prompt_ids) for r in reqs]
        ids, mask, positions = self._pad(seqs)
        left = self.padding_side == "left"
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            logits_to_keep=1 if left else 0,
        )
        rows = torch.arange(len(reqs), device=out.logits.device)
        last = (
            torch.full_like(rows, out.logits.shape[1] - 1)
            if left
            else torch.tensor([len(x) - 1 for x in seqs], device=rows.device)
        )
        logprobs = torch.log_softmax(out.logits[rows, last].float(), dim=-1)
        width = max(len(r.option_ids) for r in reqs)
        options = torch.tensor(
            [[o[0] for o in r.option_ids] + [0] * (width - len(r.option_ids)) for r in reqs],
            device=logprobs.device,
        )
        picked = logprobs.gather(1, options).tolist()
        return [values[: len(r.option_ids)] for values, r in zip(picked, reqs)]

    @torch.inference_mode()
    def _score_shared_prefix(self, reqs: list[ChoiceRequest]) -> list[list[float]]:
        """Multi-token options: the prompt (but its last token) runs once into a KV cache, which
        is repeated per option; each option row then feeds ``[last prompt token] + option[:-1]``
        and reads the option's tokens. Same numbers as scoring each prompt + option alone."""
        k = max(len(r.option_ids) for r in reqs)
        ids, mask, positions = self._pad([list(r.prompt_ids[:-1]) for r in reqs])
        cache = self.model(
            input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
            logits_to_keep=1,
        ).past_key_values  # fmt: skip
        cache.batch_repeat_interleave(k)
        options = [list(r.option_ids[j % len(r.option_ids)]) for r in reqs for j in range(k)]
        feeds = [[r.prompt_ids[-1], *o[:-1]] for r, o in zip(
            (r for r in reqs for _ in range(k)), options)]  # fmt: skip
        width = max(len(f) for f in feeds)
        feed_ids = torch.full((len(feeds), width), self.pad_id, dtype=torch.long)
        feed_mask = torch.zeros((len(feeds), width), dtype=torch.long)
        targets = torch.zeros((len(feeds), width), dtype=torch.long)
        for i, (f, o) in enumerate(zip(feeds, options)):
            feed_ids[i, : len(f)] = torch.tensor(f)
            feed_mask[i, : len(f)] = 1
            targets[i, : len(o)] = torch.tensor(o)
        start = mask.sum(-1).repeat_interleave(k).cpu()[:, None]
        out = self.model(
            input_ids=feed_ids.to(self.device),
            attention_mask=torch.cat([mask.repeat_interleave(k, 0), feed_mask.to(self.device)], 1),
            position_ids=(start + torch.arange(width)[None, :]).to(self.device),
            past_key_values=cache,
            use_cache=False,
        )
        logprobs = torch.log_softmax(out.logits.float(), dim=-1)
        picked = logprobs.gather(2, targets.to(logprobs.device)[..., None])[..., 0]
        sums = (picked * feed_mask.to(picked.device)).sum(-1).view(len(reqs), k).tolist()
        return [row[: len(r.option_ids)] for row, r in zip(sums, reqs)]

    def _score_full(self, reqs: list[ChoiceRequest]) -> list[list[float]]:
        """Each prompt + option as its own sequence (the reference; used for 1-token prompts)."""
        seqs = [list(r.prompt_ids) + list(o) for r in reqs for o in r.option_ids]
        spans = [len(o) for r in reqs for o in r.option_ids]
        flat = [sum(x) for x in self._token_logprobs(seqs, spans)]
        out, i = [], 0
        for r in reqs:
            out.append(flat[i : i + len(r.option_ids)])
            i += len(r.option_ids)
        return out

    @torch.inference_mode()
    def generate(self, prompt_ids: list[list[int]], max_new_tokens: int) -> list[str]:
        """Greedy continuations (left-padded batches), decoded without special tokens."""
        texts: list[Any] = [None] * len(prompt_ids)
        order = sorted(range(len(prompt_ids)), key=lambda i: -len(prompt_ids[i]))
        side, self.padding_side = self.padding_side, "left"
        try:
            for start in range(0, len(order), self.batch_size):
                batch = order[start : start + self.batch_size]
                ids, mask, _ = self._pad([list(prompt_ids[i]) for i in batch])
                with self._active_model():
                    new = self._generate(ids, mask, max_new_tokens)
                for i, row in zip(batch, new.tolist()):
                    texts[i] = self.tokenizer.decode(row, skip_special_tokens=True).strip()
        finally:
            self.padding_side = side
        return texts

    def _generate(self, ids: torch.Tensor, mask: torch.Tensor, max_new_tokens: int) -> Any:
        return self.model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=self.pad_id,
        )[:, ids.shape[1] :]
