"""The transformers engine: batched option scoring and greedy generation, CPU or GPU, PEFT adapters.

How a batch is computed -- one forward pass for single-token options, a KV cache shared by a
prompt's options otherwise, the prefix cache across prompts -- is
:mod:`scd.eval.engines.hf_forward`'s; this module is the engine around it: loading, adapters,
steering and erasure hooks, the batching loop and generation.

Adapters: the base model is loaded once; :meth:`HFEngine.use_adapter` loads a PEFT adapter onto
it (unmerged) and switches between adapters, or runs the base with the adapter layers disabled.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scd.config.engine import EVAL_BATCH_SIZE, EngineSpec, engine_spec
from scd.errors import InputError, cut_line
from scd.eval.engines import ChoiceRequest, require_adapter
from scd.eval.engines.hf_forward import MIN_SHARED_HEAD, BatchForward, inference
from scd.eval.engines.hf_hooks import Interventions
from scd.eval.engines.hf_setup import HFOptions, load_model, telling_line
from scd.progress import tick

__all__ = ["MIN_SHARED_HEAD", "HFEngine"]


class HFEngine(BatchForward):
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

    @inference
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
