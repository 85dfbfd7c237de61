"""Activation steering (contrastive activation addition: Rimsky et al. 2024, "Steering Llama 2 via
Contrastive Activation Addition"; Turner et al. 2023): per layer, the mean difference of the
residual stream between the unbiased and the biased answer to the same contact prompts, read at
the answer's last token, the prompts of each unbiased answer ("Yes", "No", ...) weighing the
same (:func:`balanced_differences`); at inference ``scale`` times one layer's vector is added
to that layer's output at every position of the prompt and the answer (a negative scale
subtracts it) -- or, with several layers together, each layer's own vector to its output.

A steering directory (``scd eval ... --steer DIR``, the ``steer`` arm's ``vector/``)::

    vectors.safetensors   {"vectors": [layers, hidden]}: each decoder layer's mean difference
    steer.json            the layer (or list of layers) and scale applied, the model's
                          fingerprint, the rows the vectors came from (count and sha256),
                          and why that layer and scale
    manifest.json         {"kind": "steering_vector"}: what a search run again may replace

The intervention is a forward hook on the decoder layer (:func:`steered`); nnsight does the same
job at a cost measured in BENCHMARKS.md ("Steering") -- docs/ARCHITECTURE.md says why scd keeps
the hook.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scd.errors import InputError
from scd.io import atomic_output_dir, read_json, write_json

__all__ = [
    "INFO",
    "VECTORS",
    "Steering",
    "add_steering",
    "balanced_differences",
    "check_fits",
    "decoder_layers",
    "layer_label",
    "layer_value",
    "load_steering",
    "residual_differences",
    "save_steering",
    "steered",
    "steering_digest",
]

VECTORS, INFO, KIND = "vectors.safetensors", "steer.json", "steering_vector"


def layer_value(layers: int | Sequence[int]) -> int | list[int]:
    """How ``steer.json``, the search's curve and the report write the layers a vector is added
    at: one layer as its number, several as a list of them."""
    if isinstance(layers, int):
        return layers
    return layers[0] if len(layers) == 1 else [int(layer) for layer in layers]


def layer_label(layers: int | Sequence[int]) -> str:
    """``16``, or ``12+16`` for the layers 12 and 16 steered together."""
    value = layer_value(layers)
    return str(value) if isinstance(value, int) else "+".join(map(str, value))


@dataclass(frozen=True)
class Steering:
    """A steering directory read back: every layer's vector, the layer (or layers) it is added
    at and the scale."""

    path: Path
    vectors: Any  # torch.Tensor [layers, hidden]
    layer: int | tuple[int, ...]
    scale: float
    fingerprint: str
    info: dict[str, Any]

    @property
    def layers(self) -> tuple[int, ...]:
        """The decoder layers it is added at, each its own layer's vector."""
        return (self.layer,) if isinstance(self.layer, int) else tuple(self.layer)

    def added(self, like: Any = None) -> dict[int, Any]:
        """``scale`` times each applied layer's vector, by layer (on ``like``'s device and in its
        dtype when given: a tensor or a parameter of the model)."""
        out = {layer: self.scale * self.vectors[layer] for layer in self.layers}
        if like is not None:
            out = {la: v.to(device=like.device, dtype=like.dtype) for la, v in out.items()}
        return out

    def digest(self) -> str:
        """What identifies a result steered by it: the vectors' and the settings' sha256."""
        data = hashlib.sha256((self.path / VECTORS).read_bytes())
        settings = [layer_value(self.layers), self.scale, self.fingerprint]
        data.update(json.dumps(settings).encode())
        return data.hexdigest()


def save_steering(
    out: Path | str,
    vectors: Any,
    layer: int | Sequence[int],
    scale: float,
    fingerprint: str,
    **info: Any,
) -> Path:
    """Write a steering directory (atomically) and return it: ``vectors`` added at ``layer``
    (one, or several together) times ``scale``."""
    from safetensors.torch import save_file

    with atomic_output_dir(out, KIND) as tmp:  # replaces a steering directory, nothing else
        save_file({"vectors": vectors.float().contiguous().cpu()}, str(tmp / VECTORS))
        write_json(
            tmp / INFO,
            {
                "kind": KIND,
                "layer": layer_value(layer),
                "scale": scale,
                "model_fingerprint": fingerprint,
                "layers": int(vectors.shape[0]),
                "hidden": int(vectors.shape[1]),
                **info,
            },
        )
        write_json(tmp / "manifest.json", {"kind": KIND})
    return Path(out)


def load_steering(path: Path | str, key: str = "steer") -> Steering:
    """A steering directory.

    Raises:
        InputError: not a steering directory of scd (naming ``key`` and the path).
    """
    from safetensors.torch import load_file

    path = Path(path)
    if not (path / INFO).is_file() or not (path / VECTORS).is_file():
        raise InputError(
            f"not a steering directory ({INFO} and {VECTORS}: the steer arm's vector/)",
            key=key,
            value=str(path),
        )
    info = read_json(path / INFO)
    if info.get("kind") != KIND:
        raise InputError(f"{INFO} is not a steering vector's", key=key, value=str(path))
    vectors = load_file(str(path / VECTORS))["vectors"]
    layer = info["layer"]
    layer = int(layer) if isinstance(layer, int) else tuple(int(la) for la in layer)
    return Steering(path, vectors, layer, float(info["scale"]), info["model_fingerprint"], info)


def steering_digest(path: str | None) -> str | None:
    """What stands for a steering directory in a result's identity (its vectors and settings;
    the hf engine's ``steer`` option)."""
    return None if path is None else load_steering(path).digest()


def decoder_layers(model: Any) -> Sequence[Any]:
    """The decoder layers of a causal LM (a PEFT model's too), in order."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder = inner.get_decoder() if hasattr(inner, "get_decoder") else inner.model
    return decoder.layers


def check_fits(steering: Steering, model: Any, fingerprint: str, key: str = "steer") -> None:
    """Refuse a steering vector of another model, or of a layer the model does not have.

    Raises:
        InputError: one line, naming the problem.
    """
    n, hidden = len(decoder_layers(model)), model.config.hidden_size
    where = str(steering.path)
    if steering.fingerprint != fingerprint:
        raise InputError(
            f"a steering vector of another model ({steering.fingerprint}, not {fingerprint})",
            key=key,
            value=where,
        )
    outside = [layer for layer in steering.layers if not 0 <= layer < n]
    if outside or not steering.layers or steering.vectors.shape != (n, hidden):
        raise InputError(
            f"layer {layer_label(steering.layers)} of vectors {tuple(steering.vectors.shape)}: "
            f"the model has {n} layers of width {hidden}",
            key=key,
            value=where,
        )


class _Hooks:
    """Forward hooks on one or more decoder layers, removed together."""

    def __init__(self, model: Any, added: Mapping[int, Any]) -> None:
        layers = decoder_layers(model)
        self.handles = [layers[la].register_forward_hook(_adder(v)) for la, v in added.items()]

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def add_steering(model: Any, steering: Any, fingerprint: str) -> tuple[Any, Steering]:
    """Add a steering vector (a directory, or one read back) to ``model`` until the returned
    hooks are removed (their ``remove()``); refused when it does not fit (:func:`check_fits`)."""
    if not isinstance(steering, Steering):
        steering = load_steering(steering)
    check_fits(steering, model, fingerprint)
    return _Hooks(model, steering.added(next(model.parameters()))), steering


def _adder(vector: Any) -> Any:
    def add(module: Any, args: Any, output: Any) -> Any:
        if isinstance(output, tuple):
            return (output[0] + vector.to(output[0].dtype), *output[1:])
        return output + vector.to(output.dtype)

    return add


@contextlib.contextmanager
def steered(model: Any, added: Mapping[int, Any]) -> Iterator[None]:
    """Each vector of ``added`` (by decoder layer: :meth:`Steering.added`) added to its layer's
    output at every position while the block runs (forward hooks; a zero vector changes
    nothing)."""
    hooks = _Hooks(model, added)
    try:
        yield
    finally:
        hooks.remove()


def residual_differences(
    model: Any, pairs: Sequence[tuple[list[int], list[int]]], batch_size: int = 16
) -> Any:
    """Per decoder layer, the mean over ``pairs`` of (residual stream at the last token of the
    first sequence) - (the same of the second): the unbiased answer's sequence first, the
    biased one's second, each the evaluator's prompt ids and the option's ids. Returns
    ``[layers, hidden]`` (float32)."""
    import torch
    from torch.nn.utils.rnn import pad_sequence

    total = None
    device = next(model.parameters()).device
    with torch.inference_mode():
        for start in range(0, len(pairs), batch_size):
            chunk = pairs[start : start + batch_size]
            seqs = [torch.tensor(s) for pair in chunk for s in pair]
            ids = pad_sequence(seqs, batch_first=True, padding_value=0).to(device)
            mask = (
                torch.arange(ids.shape[1])[None, :] < torch.tensor([len(s) for s in seqs])[:, None]
            )
            out = model(input_ids=ids, attention_mask=mask.to(device), output_hidden_states=True)
            last = torch.tensor([len(s) - 1 for s in seqs], device=device)
            rows = torch.arange(len(seqs), device=device)
            states = torch.stack([h[rows, last] for h in out.hidden_states[1:]], 1).float()
            diff = (states[0::2] - states[1::2]).sum(0)  # [layers, hidden]
            total = diff if total is None else total + diff
    return total / len(pairs)


def balanced_differences(
    model: Any, groups: Sequence[Sequence[tuple[list[int], list[int]]]], batch_size: int = 16
) -> Any:
    """The mean over ``groups`` of each group's :func:`residual_differences`, every group
    weighing the same whatever its size. Grouped by the unbiased answer (the pairs answered
    "Yes" vs "No" in one group, "No" vs "Yes" in the other), the answer word's own activation
    enters once with each sign and cancels, as Rimsky et al. balance the A/B letter: left is the
    unbiased vs biased choice, not "Yes" vs "No". Returns ``[layers, hidden]`` (float32)."""
    import torch

    return torch.stack([residual_differences(model, g, batch_size) for g in groups]).mean(0)
