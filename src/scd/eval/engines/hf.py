"""The transformers engine: batched option scoring and greedy generation, CPU or GPU, PEFT adapters.

Option scoring: when every option is a single token, one forward pass per prompt gives all
options' log-probabilities at the last position; otherwise (real tokenizers split "Likely",
"Unlikely", "Mostly", "Rarely" and BBQ's answers into several tokens) the prompt runs once into a
KV cache shared by its options, and each option's token log-probabilities are summed. Batches
are formed from length-sorted requests; positions are computed from the attention mask, so the
padding side does not change a result (tests compare every path with a one-sequence forward).

Prefix cache: with ``prefix_cache`` on (the default) requests are sorted by their token ids
instead, so that prompts with the same head -- a chat template's system text, the paper
protocol's Llama 2 system prompt, a BBQ context -- fall into one batch, unless length order
leaves less to compute (:mod:`scd.eval.engines.batching`); the head that all of a
batch's prompts share (at least :data:`MIN_SHARED_HEAD` tokens) runs once, at batch size one,
into transformers' ``DynamicCache``, which is repeated for every row
(``batch_repeat_interleave``), and only each prompt's rest is computed: the same numbers on every
path (single-token options, multi-token options, generation).

Adapters: the base model is loaded once; :meth:`HFEngine.use_adapter` loads a PEFT adapter onto
it (unmerged) and switches between adapters, or runs the base with the adapter layers disabled.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scd.config.engine import EVAL_BATCH_SIZE, EngineSpec, engine_spec
from scd.errors import InputError, cut_line
from scd.eval.engines import ChoiceRequest, require_adapter
from scd.eval.engines.batching import batch_order, length_order, shared_head
from scd.eval.engines.hf_hooks import Interventions
from scd.eval.engines.hf_setup import HFOptions, load_model, telling_line
from scd.progress import tick

if TYPE_CHECKING:
    import torch

__all__ = ["MIN_SHARED_HEAD", "HFEngine"]

MIN_SHARED_HEAD = 16  # tokens: a batch's shared head shorter than this is computed per row


def _inference(method: Callable) -> Callable:
    """``torch.inference_mode`` around ``method`` (torch imported when the engine runs: importing
    this module imports no torch)."""

    @functools.wraps(method)
    def run(*args: Any, **kwargs: Any) -> Any:
        import torch

        with torch.inference_mode():
            return method(*args, **kwargs)

    return run


class HFEngine:
    """Batched transformers inference behind the engine interface."""

    help = "transformers (CPU or GPU)"
    Options = HFOptions
    name = "hf"
    model_kinds = ("causal", "masked", "classifier")  # the stigma probes' other models run here

    def __init__(
        self,
        model: str,
        spec: EngineSpec | None = None,
        *,
        tokenizer: Any = None,
        adapters: Sequence[str] = (),
        padding_side: str = "left",
    ) -> None:
        import torch

        spec = (spec or engine_spec("hf")).check()
        self.device = spec.device or ("cuda" if torch.cuda.is_available() else "cpu")
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise InputError("no CUDA GPU is available here", key="device", value=self.device)
        if self.device == "mps" and not torch.backends.mps.is_available():
            raise InputError("no Apple GPU is available here", key="device", value="mps")
        for path in adapters:
            require_adapter(path)
        self._attach(model, load_model(model, self.device, spec.dtype), tokenizer, spec.batch_size)
        self.padding_side = padding_side
        self.prefix_cache = spec.prefix_cache is not False  # None: the default, on
        self.use_steering(getattr(spec, "steer", None))
        self.use_erasure(getattr(spec, "erase", None))

    @classmethod
    def in_memory(cls, model: Any, tokenizer: Any, batch_size: int | None = None) -> HFEngine:
        """An engine over a model already loaded -- the one being trained, PEFT layers on --
        on the device it is on; it switches no adapters."""
        engine = cls.__new__(cls)
        engine.device = str(next(model.parameters()).device)
        engine._attach("the model in memory", model, tokenizer, batch_size)
        engine.padding_side = "left"
        engine.prefix_cache = True
        return engine

    def _attach(self, name: str, model: Any, tokenizer: Any, batch_size: int | None) -> None:
        self.model_name, self.model, self.tokenizer = name, model, tokenizer
        dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
        self.ran = {"device": self.device, "dtype": dtype}  # what "auto" became
        self.adapters: dict[str, str] = {}  # adapter path -> PEFT adapter name
        self.active: str | None = None
        self.steering = self.erasure = None  # what its hooks apply (hf_hooks.Interventions)
        self._hooks = Interventions()
        self._loaded = 0
        self.batch_size = batch_size or EVAL_BATCH_SIZE
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
                    f"does not fit the model {self.model_name} ({cut_line(telling_line(err))})",
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

    def use_steering(self, steering: Any) -> None:
        """Add a steering vector to the next calls (a steering directory, or one read back:
        :mod:`scd.eval.steering`), or none.

        Raises:
            InputError: a vector of another model, or of a layer it does not have.
        """
        self.steering = self._hooks.use(self, "steer", steering)

    def use_erasure(self, erasure: Any) -> None:
        """Erase a concept in the next calls (an eraser directory, or one read back:
        :mod:`scd.eval.erasure`), or none; refused as :meth:`use_steering` refuses."""
        self.erasure = self._hooks.use(self, "erase", erasure)

    def _active_model(self) -> contextlib.AbstractContextManager:
        """The base model when no adapter is in use: PEFT's layers switched off."""
        if self.active is None and self.adapters:
            return self.model.disable_adapter()
        return contextlib.nullcontext()

    def close(self) -> None:
        """Drop the model and free accelerator memory."""
        import torch

        self.model = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def _pad(
        self, seqs: Sequence[Sequence[int]], side: str | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Padded ids, attention mask and positions (``side``: default the engine's)."""
        import torch
        from torch.nn.utils.rnn import pad_sequence

        rows = [torch.tensor(s, dtype=torch.long) for s in seqs]
        side = side or self.padding_side
        ids = pad_sequence(rows, batch_first=True, padding_value=self.pad_id, padding_side=side)
        mask = pad_sequence([torch.ones_like(r) for r in rows], batch_first=True, padding_side=side)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        return ids.to(self.device), mask.to(self.device), positions.to(self.device)

    def _head(self, prompts: Sequence[Sequence[int]], rest: int) -> int:
        """How many leading tokens all ``prompts`` share that the prefix cache computes once,
        leaving at least ``rest`` tokens of each to run after them (0: none worth it)."""
        return shared_head(prompts, rest, MIN_SHARED_HEAD) if self.prefix_cache else 0

    def _after_head(
        self, seqs: Sequence[Sequence[int]], head: Sequence[int], side: str | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Any]:
        """:meth:`_pad` of ``seqs`` as the continuation of ``head`` (the same for every row):
        the attention mask and positions cover the head too, and the head's KV cache, computed
        once and repeated for every row, comes fourth (None without a head)."""
        import torch

        ids, mask, positions = self._pad(seqs, side)
        if not head:
            return ids, mask, positions, None
        head_ids = torch.tensor([list(head)], device=self.device)
        cache = self.model(input_ids=head_ids, use_cache=True, logits_to_keep=1).past_key_values
        cache.batch_repeat_interleave(len(seqs))
        mask = torch.cat([mask.new_ones(len(seqs), len(head)), mask], 1)
        return ids, mask, positions + len(head), cache

    def _order(self, prompts: Sequence[Sequence[int]]) -> list[int]:
        """The order requests are batched in (:mod:`scd.eval.engines.batching`)."""
        if self.prefix_cache:
            return batch_order(prompts, self.batch_size, MIN_SHARED_HEAD)
        return length_order(prompts)

    @_inference
    def _token_logprobs(self, seqs: list[list[int]], spans: list[int]) -> list[list[float]]:
        """Log-probabilities of the last ``spans[i]`` tokens of each sequence, per token."""
        import torch

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
        order = self._order([r.prompt_ids for r in requests])
        scores: list[Any] = [None] * len(requests)
        with self._active_model():
            start = 0
            while start < len(order):
                batch = order[start : start + self.batch_size]
                for i, v in zip(batch, self._score_batch([requests[i] for i in batch])):
                    scores[i] = v
                start += len(batch)
                tick(start, len(order))
        return scores

    def _score_batch(self, reqs: list[ChoiceRequest]) -> list[list[float]]:
        """One batch by the fastest path that applies. A batch that runs out of GPU memory is
        scored in halves, and the engine keeps the smaller batch size for the batches after it
        (the numbers do not depend on the batch: positions come from the attention mask)."""
        import torch

        try:
            if all(len(o) == 1 for r in reqs for o in r.option_ids):
                return self._score_single(reqs)
            if min(len(r.prompt_ids) for r in reqs) > 1:
                return self._score_shared_prefix(reqs)
            return self._score_full(reqs)
        except torch.OutOfMemoryError:
            if len(reqs) == 1:
                raise
        if self.device.startswith("cuda"):
            torch.cuda.empty_cache()
        half = len(reqs) // 2
        if half < self.batch_size:
            self.batch_size = half
            print(
                f"out of memory at a batch of {len(reqs)}: scoring batches of {half}",
                file=sys.stderr,
                flush=True,
            )
        return self._score_batch(reqs[:half]) + self._score_batch(reqs[half:])

    @_inference
    def _score_single(self, reqs: list[ChoiceRequest]) -> list[list[float]]:
        """Single-token options: one forward pass (after the batch's shared head), all options
        read at the last position."""
        import torch
        from torch.nn.utils.rnn import pad_sequence

        head = reqs[0].prompt_ids[: self._head([r.prompt_ids for r in reqs], rest=1)]
        rests = [r.prompt_ids[len(head) :] for r in reqs]
        ids, mask, positions, cache = self._after_head(rests, head)
        left = self.padding_side == "left"
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            logits_to_keep=1 if left else 0,
        )
        rows = torch.arange(len(reqs), device=mask.device)
        ends = torch.tensor([len(x) - 1 for x in rests], device=mask.device)
        last = out.logits[:, -1] if left else out.logits[rows, ends]
        logprobs = torch.log_softmax(last.float(), dim=-1)
        options = [torch.tensor([o[0] for o in r.option_ids]) for r in reqs]
        options = pad_sequence(options, batch_first=True).to(logprobs.device)  # 0 after the last
        picked = logprobs.gather(1, options).tolist()
        return [values[: len(r.option_ids)] for values, r in zip(picked, reqs)]

    @_inference
    def _score_shared_prefix(self, reqs: list[ChoiceRequest]) -> list[list[float]]:
        """Multi-token options: the prompt (but its last token) runs once into a KV cache (after
        the batch's shared head), which is repeated per option; each option row then feeds
        ``[last prompt token] + option[:-1]`` and reads the option's tokens. Same numbers as
        scoring each prompt + option alone."""
        import torch
        from torch.nn.utils.rnn import pad_sequence

        k = max(len(r.option_ids) for r in reqs)
        head = reqs[0].prompt_ids[: self._head([r.prompt_ids for r in reqs], rest=2)]
        rests = [r.prompt_ids[len(head) : -1] for r in reqs]
        ids, mask, positions, cache = self._after_head(rests, head)
        cache = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        ).past_key_values
        cache.batch_repeat_interleave(k)
        options = [list(r.option_ids[j % len(r.option_ids)]) for r in reqs for j in range(k)]
        feeds = [
            [r.prompt_ids[-1], *o[:-1]]
            for r, o in zip((r for r in reqs for _ in range(k)), options)
        ]
        feed_ids, feed_mask, _ = self._pad(feeds, "right")
        targets = pad_sequence([torch.tensor(o) for o in options], batch_first=True)
        start = mask.sum(-1).repeat_interleave(k)[:, None]  # each row's prompt length
        out = self.model(
            input_ids=feed_ids,
            attention_mask=torch.cat([mask.repeat_interleave(k, 0), feed_mask], 1),
            position_ids=start + torch.arange(feed_ids.shape[1], device=feed_ids.device),
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
        flat = iter([sum(x) for x in self._token_logprobs(seqs, spans)])
        return [list(itertools.islice(flat, len(r.option_ids))) for r in reqs]

    @_inference
    def generate(
        self, prompt_ids: list[list[int]], max_new_tokens: int, *, messages: Any = None
    ) -> list[str]:
        """Greedy continuations (left-padded batches, after the batch's shared head), decoded
        without special tokens."""
        import torch

        texts: list[Any] = [None] * len(prompt_ids)
        order = self._order(prompt_ids)
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            batch = [prompt_ids[i] for i in rows]
            head = batch[0][: self._head(batch, rest=1)]
            with self._active_model():
                ids, mask, _, cache = self._after_head(
                    [p[len(head) :] for p in batch], head, "left"
                )
                if head:  # generate takes the head's tokens from the cache, the rest from ids
                    heads = torch.tensor([list(head)] * len(batch), device=ids.device)
                    ids = torch.cat([heads, ids], 1)
                new = self.model.generate(
                    input_ids=ids,
                    attention_mask=mask,
                    past_key_values=cache,
                    max_new_tokens=max_new_tokens,
                    do_sample=False,
                    pad_token_id=self.pad_id,
                )
            for i, row in zip(rows, new[:, ids.shape[1] :].tolist()):
                texts[i] = self.tokenizer.decode(row, skip_special_tokens=True).strip()
            tick(start + len(batch), len(order))
        return texts
