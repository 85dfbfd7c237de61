"""Activation steering (contrastive activation addition: Rimsky et al. 2024, "Steering Llama 2 via
Contrastive Activation Addition"; Turner et al. 2023): per layer, the mean difference of the
residual stream between the unbiased and the biased answer to the same contact prompts, read at
the answer's last token, the prompts of each unbiased answer ("Yes", "No", ...) weighing the
same (:func:`balanced_differences`); at inference ``scale`` times one layer's vector is added
to that layer's output from the assistant's turn on (``positions: answer``, the steer arm's
since #77: :mod:`scd.eval.positions`) or at every position of the prompt and the answer
(``positions: all``; a directory without the key, written before, means it) -- a negative scale
subtracts it -- or, with several layers together, each layer's own vector to its output.

A steering directory (``scd eval ... --steer DIR``, the ``steer`` arm's ``vector/``)::

    vectors.safetensors   {"vectors": [layers, hidden]}: each decoder layer's mean difference
    steer.json            the layer (or list of layers), scale and positions applied, the
                          model's fingerprint, the rows the vectors came from (count and
                          sha256), why that layer and scale, the diagnostics of the vectors
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
    "decoder",
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
    positions: str = "all"  # answer: from the assistant's turn on (scd.eval.positions)

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
        if self.positions != "all":  # every position: the identity of a directory before #77
            settings.append(self.positions)
        data.update(json.dumps(settings).encode())
        return data.hexdigest()

    def check_fits(self, model: Any, fingerprint: str, key: str = "steer") -> None:
        """:func:`check_fits`."""
        check_fits(self, model, fingerprint, key)

    def attach(self, model: Any, tokenizer: Any = None) -> _Hooks:
        """Add it to ``model`` until the returned hooks are removed (their ``remove()``);
        ``tokenizer``: the model's, which tells the assistant's turn (``positions: answer``)."""
        from scd.eval.positions import Turn

        turn = Turn(tokenizer) if self.positions == "answer" else None
        return _Hooks(model, self.added(next(model.parameters())), turn)

    @contextlib.contextmanager
    def applied(self, model: Any, tokenizer: Any = None) -> Iterator[None]:
        """:meth:`attach` while the block runs."""
        hooks = self.attach(model, tokenizer)
        try:
            yield
        finally:
            hooks.remove()


def save_steering(
    out: Path | str,
    vectors: Any,
    layer: int | Sequence[int],
    scale: float,
    fingerprint: str,
    positions: str = "all",
    **info: Any,
) -> Path:
    """Write a steering directory (atomically) and return it: ``vectors`` added at ``layer``
    (one, or several together) times ``scale``, at ``positions`` (answer or all)."""
    from safetensors.torch import save_file

    with atomic_output_dir(out, KIND) as tmp:  # replaces a steering directory, nothing else
        save_file({"vectors": vectors.float().contiguous().cpu()}, str(tmp / VECTORS))
        write_json(
            tmp / INFO,
            {
                "kind": KIND,
                "layer": layer_value(layer),
                "scale": scale,
                "positions": positions,
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
    positions = info.get("positions", "all")  # written before #77: added at every position
    scale, fingerprint = float(info["scale"]), info["model_fingerprint"]
    return Steering(path, vectors, layer, scale, fingerprint, info, positions)


def steering_digest(path: str | None) -> str | None:
    """What stands for a steering directory in a result's identity (its vectors and settings;
    the hf engine's ``steer`` option)."""
    return None if path is None else load_steering(path).digest()


def decoder(model: Any) -> Any:
    """The decoder of a causal LM (a PEFT model's too): the module that runs its layers."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return inner.get_decoder() if hasattr(inner, "get_decoder") else inner.model


def decoder_layers(model: Any) -> Sequence[Any]:
    """The decoder layers of a causal LM (a PEFT model's too), in order."""
    return decoder(model).layers


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
    """Forward hooks on one or more decoder layers (and, to add from the assistant's turn on,
    the pre-hook on the decoder that tells it: ``turn``), removed together."""

    def __init__(self, model: Any, added: Mapping[int, Any], turn: Any = None) -> None:
        layers = decoder_layers(model)
        self.handles = [] if turn is None else [turn.hook(decoder(model))]
        self.handles += [
            layers[la].register_forward_hook(_adder(v, turn)) for la, v in added.items()
        ]

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def add_steering(
    model: Any, steering: Any, fingerprint: str, tokenizer: Any = None
) -> tuple[Any, Steering]:
    """Add a steering vector (a directory, or one read back) to ``model`` until the returned
    hooks are removed (their ``remove()``); refused when it does not fit (:func:`check_fits`).
    ``tokenizer``: the model's (a vector added from the assistant's turn needs it)."""
    if not isinstance(steering, Steering):
        steering = load_steering(steering)
    check_fits(steering, model, fingerprint)
    return steering.attach(model, tokenizer), steering


def _adder(vector: Any, turn: Any = None) -> Any:
    def add(module: Any, args: Any, output: Any) -> Any:
        hidden = output[0] if isinstance(output, tuple) else output
        v = vector.to(hidden.dtype)
        if turn is not None:  # the positions of the assistant's turn in this pass
            v = turn.mask[..., None].to(hidden.dtype) * v
        return (hidden + v, *output[1:]) if isinstance(output, tuple) else hidden + v

    return add


@contextlib.contextmanager
def steered(model: Any, added: Mapping[int, Any], turn: Any = None) -> Iterator[None]:
    """Each vector of ``added`` (by decoder layer: :meth:`Steering.added`) added to its layer's
    output while the block runs (forward hooks; a zero vector changes nothing): at every
    position, or from the assistant's turn on with ``turn`` (a
    :class:`scd.eval.positions.Turn`)."""
    hooks = _Hooks(model, added, turn)
    try:
        yield
    finally:
        hooks.remove()


def answer_states(
    model: Any, pairs: Sequence[tuple[list[int], list[int]]], batch_size: int = 16
) -> Iterator[Any]:
    """For each batch of ``pairs``, the residual stream after every decoder layer at the last
    token of each sequence: ``[2 * pairs, layers, hidden]`` (float32), each pair's first
    sequence (the unbiased answer's) then its second (the biased one's)."""
    import torch
    from torch.nn.utils.rnn import pad_sequence

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
            yield torch.stack([h[rows, last] for h in out.hidden_states[1:]], 1).float()


def residual_differences(
    model: Any, pairs: Sequence[tuple[list[int], list[int]]], batch_size: int = 16
) -> Any:
    """Per decoder layer, the mean over ``pairs`` of (residual stream at the last token of the
    first sequence) - (the same of the second): the unbiased answer's sequence first, the
    biased one's second, each the evaluator's prompt ids and the option's ids. Returns
    ``[layers, hidden]`` (float32)."""
    total = None
    for states in answer_states(model, pairs, batch_size):
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
