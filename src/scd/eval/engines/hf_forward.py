"""How the transformers engine computes a batch: option scoring paths and the prefix cache.

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

"""

from __future__ import annotations

import functools
import itertools
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from scd.eval.engines import ChoiceRequest
from scd.eval.engines.batching import batch_order, length_order, shared_head

if TYPE_CHECKING:
    import torch

__all__ = ["MIN_SHARED_HEAD", "BatchForward", "inference"]

MIN_SHARED_HEAD = 16  # tokens: a batch's shared head shorter than this is computed per row


def inference(method: Callable) -> Callable:
    """``torch.inference_mode`` around ``method`` (torch imported when the engine runs: importing
    this module imports no torch)."""

    @functools.wraps(method)
    def run(*args: Any, **kwargs: Any) -> Any:
        import torch

        with torch.inference_mode():
            return method(*args, **kwargs)

    return run


class BatchForward:
    """The forward passes of :class:`~scd.eval.engines.hf.HFEngine`: it provides ``model``,
    ``device``, ``pad_id``, ``padding_side``, ``prefix_cache`` and ``batch_size``."""

    model: Any
    device: str
    pad_id: int
    padding_side: str
    prefix_cache: bool
    batch_size: int

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

    @inference
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

    def _prompt_pass(self, reqs: list[ChoiceRequest], use_cache: bool) -> tuple[Any, Any, Any]:
        """Each prompt once (after the batch's shared head): the log-probabilities after its
        last token, the attention mask (the head included) and, with ``use_cache``, the KV
        cache."""
        import torch

        head = reqs[0].prompt_ids[: self._head([r.prompt_ids for r in reqs], rest=1)]
        rests = [r.prompt_ids[len(head) :] for r in reqs]
        ids, mask, positions, cache = self._after_head(rests, head)
        left = self.padding_side == "left"
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=use_cache,
            logits_to_keep=1 if left else 0,
        )
        rows = torch.arange(len(reqs), device=mask.device)
        ends = torch.tensor([len(x) - 1 for x in rests], device=mask.device)
        last = out.logits[:, -1] if left else out.logits[rows, ends]
        return torch.log_softmax(last.float(), dim=-1), mask, out.past_key_values

    @inference
    def _score_single(self, reqs: list[ChoiceRequest]) -> list[list[float]]:
        """Single-token options: one forward pass (after the batch's shared head), all options
        read at the last position."""
        import torch
        from torch.nn.utils.rnn import pad_sequence

        logprobs, _, _ = self._prompt_pass(reqs, use_cache=False)
        options = [torch.tensor([o[0] for o in r.option_ids]) for r in reqs]
        options = pad_sequence(options, batch_first=True).to(logprobs.device)  # 0 after the last
        picked = logprobs.gather(1, options).tolist()
        return [values[: len(r.option_ids)] for values, r in zip(picked, reqs)]

    @inference
    def _score_shared_prefix(self, reqs: list[ChoiceRequest]) -> list[list[float]]:
        """Multi-token options: the prompt runs once into a KV cache (after the batch's shared
        head), and its last position's logits score every option's first token; the cache is
        repeated per option, and each option row feeds ``option[:-1]`` to read the option's
        other tokens. The first token's distribution is computed once per prompt, not once per
        option (with a large vocabulary the output layer is most of a small model's work). Same
        numbers as scoring each prompt + option alone."""
        import torch
        from torch.nn.utils.rnn import pad_sequence

        k = max(len(r.option_ids) for r in reqs)
        logprobs, mask, cache = self._prompt_pass(reqs, use_cache=True)
        first = logprobs.repeat_interleave(k, 0)
        cache.batch_repeat_interleave(k)
        options = [list(r.option_ids[j % len(r.option_ids)]) for r in reqs for j in range(k)]
        sums = first.gather(1, torch.tensor([o[0] for o in options], device=first.device)[:, None])
        feeds = [o[:-1] or [self.pad_id] for o in options]  # a 1-token option feeds a masked pad
        feed_ids, feed_mask, _ = self._pad(feeds, "right")
        feed_mask[[i for i, o in enumerate(options) if len(o) == 1], 0] = 0
        targets = pad_sequence([torch.tensor(o[1:] or [0]) for o in options], batch_first=True)
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
        sums = sums[:, 0] + (picked * feed_mask.to(picked.device)).sum(-1)
        sums = sums.view(len(reqs), k).tolist()
        return [row[: len(r.option_ids)] for row, r in zip(sums, reqs)]

    def _score_full(self, reqs: list[ChoiceRequest]) -> list[list[float]]:
        """Each prompt + option as its own sequence (the reference; used for 1-token prompts)."""
        seqs = [list(r.prompt_ids) + list(o) for r in reqs for o in r.option_ids]
        spans = [len(o) for r in reqs for o in r.option_ids]
        flat = iter([sum(x) for x in self._token_logprobs(seqs, spans)])
        return [list(itertools.islice(flat, len(r.option_ids))) for r in reqs]
