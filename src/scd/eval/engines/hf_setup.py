"""What the transformers engine is set up from: its options (:class:`HFOptions`, the engine's
flags and recipe keys) and the causal LM it loads (:func:`load_model`, which the capability KL
loads its models with too)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scd.config.engine import EVAL_BATCH_SIZE, EngineSpec, resolve_dtype
from scd.config.options import Pin, device_name, option, positive
from scd.config.threads import n_parameters, use_threads
from scd.errors import InputError
from scd.eval.erasure import erasure_digest
from scd.eval.steering import steering_digest

__all__ = [
    "HFOptions",
    "load_model",
    "telling_line",
]


@dataclass
class HFOptions(EngineSpec):
    """The transformers engine's options (also what the stigma probes' masked LMs and
    classifiers run with)."""

    batch_size: int | None = option(
        None, f"prompts per forward (default: {EVAL_BATCH_SIZE})", check=positive, speed=True
    )
    device: str | None = option(
        None,
        "cpu, cuda, cuda:1 (default: cuda if available)",
        check=device_name,
        speed=True,
    )
    prefix_cache: bool | None = option(
        None,
        "compute the token head a batch's prompts share once and reuse its KV cache (the same "
        "numbers; default: on, batching prompts by token ids or by length, whichever leaves "
        "less to compute; --no-prefix-cache computes every prompt whole)",
        speed=True,
        kinds=("causal",),
    )
    steer: str | None = option(
        None,
        "a steering directory (scd's steer arm: vector/, scd.eval.steering): its vector added "
        "to its layer's output at its scale, from the assistant's turn on or at every position "
        "as its steer.json says; hf only",
        digest=steering_digest,  # scd.eval.steering
        pin=Pin.CHANGED,
        kinds=("causal",),
    )
    erase: str | None = option(
        None,
        "an eraser directory (scd's erase arm: eraser/, scd.eval.erasure): the group a prompt "
        "names erased (LEACE) from the residual stream entering its layers, at every position; "
        "hf only",
        digest=erasure_digest,  # scd.eval.erasure
        pin=Pin.CHANGED,
        kinds=("causal",),
    )

    def details(self, ran: dict[str, Any]) -> list[str]:
        device = ran.get("device") or self.device or "cuda if available, else cpu"
        return [f"batch {self.batch_size or EVAL_BATCH_SIZE}", f"device {device}"]


def telling_line(err: BaseException) -> str:
    """The most telling line of an error ("size mismatch for ..." rather than a heading; not
    scd.errors.first_line, which takes the first)."""
    lines = [x.strip() for x in str(err).strip().splitlines() if x.strip()]
    telling = [x for x in lines if "mismatch" in x or "not found" in x.lower()]
    return (telling or lines or [type(err).__name__])[0]


def load_model(model: str, device: str, dtype: str) -> Any:
    """Load a causal LM through ``from_pretrained`` (no remote code), in eval mode, torch's
    threads set for its size (:func:`scd.config.threads.use_threads`)."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the evaluation has its own progress bar
    import torch

    torch_dtype = getattr(torch, resolve_dtype(dtype, device))
    try:
        lm = AutoModelForCausalLM.from_pretrained(model, dtype=torch_dtype, trust_remote_code=False)
    except (OSError, ValueError) as err:
        raise InputError(
            "cannot load a causal LM (a local model directory or a Hub id is "
            f"expected): {telling_line(err)}",
            key="model",
            value=model,
        ) from None
    use_threads(n_parameters(lm))
    return lm.to(device).eval()
