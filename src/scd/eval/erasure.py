"""Linear concept erasure of the group a prompt has named (LEACE: Belrose et al. 2023, "LEACE:
Perfect linear concept erasure in closed form"; EleutherAI's ``concept-erasure`` package fits it).

The concept, per token: which group the prompt has named so far. A descriptor prompt's tokens
from the first one where it differs from its descriptor-free baseline (the same template with
the bare noun: where the descriptor begins) to its end are labelled with the descriptor's
HolisticBias axis (``concept: axis``; or its bucket, or the descriptor itself), a baseline's
tokens from the same place on with ``baseline``, a class of its own; the tokens before that
place -- which a causal model cannot have read the group at -- carry the classes' prior, so
they shape the eraser's statistics (every position is where it acts) but not the contrast.
The eraser of a layer is fitted on the base model's residual stream entering that decoder layer
(layer 0: the token embeddings) at every token of the setting's training prompts and their
baselines, and applied at every position of every pass (a forward pre-hook on the layer): no
linear classifier of a position's residual then tells which group the prompt named, or that it
named none, better than a constant (LEACE's guarantee, for the fitted statistics), and the
change to the residual is the least that does so. Several layers are fitted in order, each with
the erasers before it applied (Belrose et al.'s concept scrubbing).

An eraser directory (``scd eval ... --erase DIR``, the ``erase`` arm's ``eraser/``)::

    erasers.safetensors   "<layer>.proj_left", "<layer>.proj_right", "<layer>.bias" per layer
                          erased (LEACE's x - (x - bias) @ proj_right.T @ proj_left.T)
    erase.json            the layers, the concept and its classes, the token counts per class,
                          the model's fingerprint, the rows it came from, why those layers
    manifest.json         {"kind": "concept_eraser"}: what a search run again may replace
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scd.errors import InputError
from scd.io import atomic_output_dir, read_json, write_json

__all__ = [
    "BASELINE",
    "ERASERS",
    "INFO",
    "UNKNOWN",
    "Erasure",
    "erasure_digest",
    "fit_erasers",
    "load_erasure",
    "save_erasure",
    "token_labels",
]

ERASERS, INFO, KIND = "erasers.safetensors", "erase.json", "concept_eraser"
BASELINE = "baseline"  # the class of a descriptor-free prompt, after its descriptor's place
UNKNOWN = -1  # a token before the descriptor's place: the classes' prior
CELL = ("principle", "scenario", "action", "scale", "contact")  # a prompt's baseline shares it


@dataclass(frozen=True)
class Erasure:
    """An eraser directory read back: per layer, LEACE's ``(proj_left, proj_right, bias)``."""

    path: Path
    erasers: dict[int, tuple[Any, Any, Any]]
    fingerprint: str
    info: dict[str, Any]

    @property
    def layers(self) -> tuple[int, ...]:
        return tuple(sorted(self.erasers))

    def digest(self) -> str:
        """What identifies a result erased by it: the erasers' and the settings' sha256."""
        data = hashlib.sha256((self.path / ERASERS).read_bytes())
        data.update(json.dumps([list(self.layers), self.fingerprint]).encode())
        return data.hexdigest()

    def check_fits(self, model: Any, fingerprint: str, key: str = "erase") -> None:
        """Refuse an eraser of another model, or of a layer or width it does not have.

        Raises:
            InputError: one line, naming the problem.
        """
        from scd.eval.steering import decoder_layers

        n, hidden = len(decoder_layers(model)), model.config.hidden_size
        if self.fingerprint != fingerprint:
            raise InputError(
                f"an eraser of another model ({self.fingerprint}, not {fingerprint})",
                key=key,
                value=str(self.path),
            )
        widths = {int(bias.shape[0]) for _, _, bias in self.erasers.values()}
        if any(not 0 <= la < n for la in self.layers) or widths - {hidden}:
            raise InputError(
                f"erasers of layers {list(self.layers)} and width {sorted(widths)}: the model "
                f"has {n} layers of width {hidden}",
                key=key,
                value=str(self.path),
            )

    def attach(self, model: Any, tokenizer: Any = None) -> _Hooks:
        """Erase in ``model`` until the returned hooks are removed (``tokenizer``: unused; the
        same call as a steering vector's)."""
        return _Hooks(model, self.erasers)

    @contextlib.contextmanager
    def applied(self, model: Any, tokenizer: Any = None) -> Iterator[None]:
        """:meth:`attach` while the block runs."""
        hooks = self.attach(model, tokenizer)
        try:
            yield
        finally:
            hooks.remove()


class _Hooks:
    """A forward pre-hook on each erased decoder layer, removed together."""

    def __init__(self, model: Any, erasers: dict[int, tuple[Any, Any, Any]]) -> None:
        from scd.eval.steering import decoder_layers

        layers, device = decoder_layers(model), next(model.parameters()).device
        self.handles = []
        for layer, tensors in erasers.items():
            left, right, bias = (t.to(device=device, dtype=_float(t)) for t in tensors)
            hook = _eraser(left, right, bias)
            self.handles.append(layers[layer].register_forward_pre_hook(hook, with_kwargs=True))

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def _float(tensor: Any) -> Any:
    import torch

    return torch.float32 if tensor.dtype != torch.float64 else torch.float64


def _eraser(left: Any, right: Any, bias: Any) -> Any:
    def erase(x: Any) -> Any:
        y = x.to(left.dtype)
        return (y - ((y - bias) @ right.T) @ left.T).to(x.dtype)

    def hook(module: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        if args:
            return (erase(args[0]), *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": erase(kwargs["hidden_states"])}

    return hook


def save_erasure(out: Path | str, erasers: dict[int, Any], fingerprint: str, **info: Any) -> Path:
    """Write an eraser directory (atomically) and return it: ``erasers`` by layer (a LEACE
    eraser, or its ``(proj_left, proj_right, bias)``); none: the model as it is."""
    from safetensors.torch import save_file

    tensors = {}
    for layer, e in sorted(erasers.items()):
        parts = e if isinstance(e, tuple) else (e.proj_left, e.proj_right, e.bias)
        for name, t in zip(("proj_left", "proj_right", "bias"), parts):
            tensors[f"{layer}.{name}"] = t.float().contiguous().cpu()
    with atomic_output_dir(out, KIND) as tmp:
        save_file(tensors, str(tmp / ERASERS))
        layers = sorted(erasers)
        write_json(
            tmp / INFO, {"kind": KIND, "layers": layers, "model_fingerprint": fingerprint, **info}
        )
        write_json(tmp / "manifest.json", {"kind": KIND})
    return Path(out)


def load_erasure(path: Path | str, key: str = "erase") -> Erasure:
    """An eraser directory.

    Raises:
        InputError: not an eraser directory of scd (naming ``key`` and the path).
    """
    from safetensors.torch import load_file

    path = Path(path)
    if not (path / INFO).is_file() or not (path / ERASERS).is_file():
        raise InputError(
            f"not an eraser directory ({INFO} and {ERASERS}: the erase arm's eraser/)",
            key=key,
            value=str(path),
        )
    info = read_json(path / INFO)
    if info.get("kind") != KIND:
        raise InputError(f"{INFO} is not a concept eraser's", key=key, value=str(path))
    tensors = load_file(str(path / ERASERS))
    erasers = {
        int(la): tuple(tensors[f"{la}.{n}"] for n in ("proj_left", "proj_right", "bias"))
        for la in info["layers"]
    }
    return Erasure(path, erasers, info["model_fingerprint"], info)


def erasure_digest(path: str | None) -> str | None:
    """What stands for an eraser directory in a result's identity (the hf engine's ``erase``
    option)."""
    return None if path is None else load_erasure(path).digest()


def token_labels(
    rows: Sequence[dict[str, Any]],
    baselines: Sequence[dict[str, Any]],
    encode: Any,
    concept: str,
    classes: Sequence[str],
) -> list[tuple[list[int], list[int]]]:
    """Each row's token ids (``encode(user texts)``) and per token its class index in
    ``classes`` (the module docstring: from its descriptor on ``row[concept]``'s, before it
    :data:`UNKNOWN`), then the same of each baseline of a row's template (from its descriptor's
    place on :data:`BASELINE`, the last class).

    Raises:
        InputError: a row whose template has no baseline among ``baselines``.
    """
    base = {tuple(b[k] for k in CELL): b for b in baselines}
    if missing := [r["prompt_id"] for r in rows if tuple(r[k] for k in CELL) not in base]:
        raise InputError(f"prompt {missing[0]} has no descriptor-free baseline to erase against")
    cells = list(dict.fromkeys(tuple(r[k] for k in CELL) for r in rows))
    plain = dict(zip(cells, encode([base[c]["user"] for c in cells])))
    place: dict[tuple, int] = {}  # where a template's descriptor begins
    out = []
    for r, ids in zip(rows, encode([r["user"] for r in rows])):
        cell = tuple(r[k] for k in CELL)
        head = next((i for i, (a, b) in enumerate(zip(ids, plain[cell])) if a != b), len(ids))
        place[cell] = min(place.get(cell, head), head)
        cls = classes.index(r[concept])
        out.append((list(ids), [UNKNOWN] * head + [cls] * (len(ids) - head)))
    last = len(classes) - 1
    for cell, ids in plain.items():
        out.append((list(ids), [UNKNOWN] * place[cell] + [last] * (len(ids) - place[cell])))
    return out


def fit_erasers(
    model: Any,
    data: Sequence[tuple[list[int], list[int]]],
    layers: Sequence[int],
    n_classes: int,
    batch_size: int = 16,
    before: dict[int, Any] | None = None,
) -> dict[int, Any]:
    """A LEACE eraser (``concept_erasure.LeaceEraser``) of each of ``layers``, fitted on the
    residual stream entering it at every token of ``data`` (token ids and class indices: one-hot
    labels, :data:`UNKNOWN` the classes' frequencies among the labelled tokens), with the
    erasers of ``before`` (by layer) applied; one pass over ``data``."""
    import torch
    from concept_erasure import LeaceFitter
    from torch.nn.utils.rnn import pad_sequence

    from scd.eval.steering import decoder_layers

    hidden, device = model.config.hidden_size, next(model.parameters()).device
    known = torch.tensor([y for _, labels in data for y in labels if y != UNKNOWN])
    prior = torch.bincount(known, minlength=n_classes).double() / max(len(known), 1)
    fitters = {la: LeaceFitter(hidden, n_classes, dtype=torch.float64) for la in layers}
    hooks = _Hooks(model, {la: _parts(e) for la, e in (before or {}).items()})
    seen: dict[str, Any] = {}
    grab = [
        decoder_layers(model)[la].register_forward_pre_hook(_grab(seen, la), with_kwargs=True)
        for la in layers
    ]
    try:
        with torch.inference_mode():
            for start in range(0, len(data), batch_size):
                chunk = data[start : start + batch_size]
                ids = pad_sequence([torch.tensor(i) for i, _ in chunk], batch_first=True)
                labels = pad_sequence([torch.tensor(y) for _, y in chunk], batch_first=True)
                valid = pad_sequence([torch.ones(len(i), dtype=torch.bool) for i, _ in chunk], True)
                labels = labels[valid]
                model(input_ids=ids.to(device), attention_mask=valid.to(device))
                z = torch.nn.functional.one_hot(labels.clamp(min=0), n_classes).double()
                z[labels == UNKNOWN] = prior
                for la in layers:
                    fitters[la].update(seen[la][valid.to(device)].double().cpu(), z)
    finally:
        for handle in grab:
            handle.remove()
        hooks.remove()
    return {la: f.eraser for la, f in fitters.items()}


def _parts(eraser: Any) -> tuple[Any, Any, Any]:
    return (
        eraser if isinstance(eraser, tuple) else (eraser.proj_left, eraser.proj_right, eraser.bias)
    )


def _grab(seen: dict, layer: int) -> Any:
    def hook(module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        seen[layer] = args[0] if args else kwargs["hidden_states"]

    return hook
