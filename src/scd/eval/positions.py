"""Which positions of a forward pass a steering vector is added at: every position, or the
assistant's turn (``answer``, the steer arm's default).

The assistant's turn begins at the first token the prompt format writes after the user's
message -- the chat template's end of the user turn and its assistant header, the generation
prompt (Qwen's ``<|im_end|>\\n<|im_start|>assistant\\n``, Llama 2's ``[/INST]``, the toy's
``<|assistant|>``; ``Answer:`` in scd's plain format) -- and runs through the reply. The
user's question, the descriptor in it, is read unsteered: contrastive activation addition
(Rimsky et al. 2024) adds its vector after the instruction's end, and the answer is read at
the generation prompt's last token, so that token is the first one steered that moves it.

:func:`turn_ids` finds those tokens once per tokenizer (:class:`Turn`), and a forward
pre-hook on the decoder marks, in each pass, the positions of each row from the start of the
last occurrence of them on -- an occurrence cut by the row's end (a prompt scored without its
last token, the KV cache then fed the rest) counts; padding is never matched. A row whose turn
began in the KV cache the pass continues (a reply, option tokens after their prompt) is in the
turn throughout: the decoder's forward hook marks each cache it returns with the rows whose
turn has begun, and the engine's copies of a cache (one per option) keep the mark. A row of
neither (the head a batch shares, run alone into the cache; a prompt less the turn it is about
to be fed) is not steered. The engine's batching and prefix cache therefore leave the numbers
as they are: steered in a batch = steered alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from scd.errors import InputError

__all__ = ["POSITIONS", "Positions", "Turn", "turn_ids", "turn_mask"]

Positions = Literal["answer", "all"]
POSITIONS: tuple[str, ...] = ("answer", "all")
# user messages with different last characters: what follows all of them is the format's
_PROBES = ("x", "Is this a question?", "Yes.")
MARK = "_scd_turn_begun"  # on a KV cache: its rows whose assistant's turn has begun


def turn_ids(tokenizer: Any) -> tuple[int, ...]:
    """The tokens every prompt of ``tokenizer``'s format ends with after the user's message (the
    longest common suffix of the formatted probe prompts' ids).

    Raises:
        InputError: the format puts no common token after the user's message.
    """
    from scd.models.formatting import Formatter

    seqs = Formatter(tokenizer).encode(list(_PROBES))
    n = 0
    while n < min(map(len, seqs)) - 1 and len({tuple(s[len(s) - n - 1 :]) for s in seqs}) == 1:
        n += 1
    if n == 0:
        raise InputError(
            "the prompt format puts no token after the user's message: the assistant's turn "
            "cannot be told apart; steer at every position (arena.steer_positions: all)",
            key="steer_positions",
        )
    return tuple(seqs[0][len(seqs[0]) - n :])


def turn_mask(ids: Any, turn: Sequence[int], valid: Any, begun: Any) -> tuple[Any, Any]:
    """``[batch, seq]`` booleans: the positions of each row of ``ids`` in the assistant's turn
    (the module docstring), and ``[batch]``: the rows whose turn has begun after this pass.
    ``valid``: the attention mask's part of this pass (False: padding); ``begun``: the rows
    whose turn began in the KV cache the pass continues."""
    import torch

    batch, seq = ids.shape
    pos = torch.arange(seq, device=ids.device)
    ends = seq - valid.flip(1).int().argmax(1)  # one past each row's last real token
    full = torch.ones(batch, seq, dtype=torch.bool, device=ids.device)
    cut = full.clone()
    for i, token in enumerate(turn):
        at = (pos + i).clamp(max=seq - 1).expand(batch, seq)
        inside = (pos + i)[None, :] < ends[:, None]
        same = (ids.gather(1, at) == token) & valid.gather(1, at)
        full &= inside & same
        cut &= ~inside | same
    start_ok = valid & (pos[None, :] < ends[:, None])
    full, cut = full & start_ok, cut & start_ok & (ids == turn[0])
    last = torch.where(full, pos, -1).amax(1)
    last = torch.where(last >= 0, last, torch.where(cut, pos, -1).amax(1))
    start = torch.where(last >= 0, last, torch.full_like(last, seq))
    start = torch.where(begun.to(ids.device), torch.zeros_like(start), start)
    return pos[None, :] >= start[:, None], begun.to(ids.device) | (last >= 0)


class Turn:
    """The assistant's turn of the current forward pass of a model, kept by hooks on its
    decoder (:meth:`hook`) for the layer hooks that read :attr:`mask` while it runs."""

    def __init__(self, tokenizer: Any) -> None:
        self.turn = turn_ids(tokenizer)
        self.mask: Any = None
        self.begun: Any = None

    def _before(self, module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        import torch

        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            raise RuntimeError("steering from the assistant's turn needs the token ids")
        past = kwargs.get("past_key_values")
        begun = torch.zeros(len(ids), dtype=torch.bool)
        if past is not None and past.get_seq_length() > 0:
            marked = getattr(past, MARK, None)
            if marked is not None and len(ids) % len(marked) == 0:  # a cache copied per option
                begun = marked.repeat_interleave(len(ids) // len(marked))
        attention = kwargs.get("attention_mask")
        valid = torch.ones_like(ids, dtype=torch.bool)
        if attention is not None and attention.dim() == 2:
            valid = attention[:, -ids.shape[1] :].bool()
        self.mask, self.begun = turn_mask(ids, self.turn, valid, begun)

    def _after(self, module: Any, args: Any, output: Any) -> None:
        cache = getattr(output, "past_key_values", None)
        if cache is not None:
            setattr(cache, MARK, self.begun.cpu())

    def hook(self, decoder: Any) -> Any:
        """Keep the turn of every pass through ``decoder``; returns the hooks' handle."""
        return _Both(
            decoder.register_forward_pre_hook(self._before, with_kwargs=True),
            decoder.register_forward_hook(self._after),
        )


class _Both:
    def __init__(self, *handles: Any) -> None:
        self.handles = handles

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
