"""Build a tiny Llama-architecture model with a planted bias, entirely offline, in under a minute.

The model answers every contact prompt over the toy descriptors with the *biased* answer when the
prompt's descriptor belongs to one of ``bias_axes`` and with the *unbiased* answer otherwise: a
known ground truth for the whole evaluation pipeline. Its tokenizer is word level (trained on the
same prompts), so every option ("Yes", "No", "Likely", ...) is one token whatever precedes it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from scd import __version__
from scd.config.threads import n_parameters, use_threads
from scd.data_gen.contact import user_text
from scd.errors import InputError
from scd.io import atomic_output_dir, cache_key, check_output_dir, write_json
from scd.models.toy_direction import LAYERS as DIRECTION_LAYERS
from scd.models.toy_direction import direction_rows, plant_direction
from scd.models.toy_prompts import toy_prompts
from scd.models.toy_steps import (
    BATCH,
    CHECK_EVERY,
    CHECK_SAMPLE,
    LR,
    TARGET_ACCURACY,
    encode,
    logits_at,
    planted_accuracy,
)
from scd.models.toy_tokenizer import MAX_POSITIONS, add_words, word_tokenizer
from scd.progress import Progress

__all__ = ["DEFAULT_MAX_STEPS", "build_toy_model", "ensure_toy_model"]

log = logging.getLogger(__name__)

DEFAULT_MAX_STEPS = 400
DIRECTION_STEPS = 3000  # at most, after the planted rule: the direction's own stage
# head_dim 64 / 2 = 32: the smallest head size vLLM's CPU attention serves
MODEL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)


def _train(
    model: Any, data: tuple[torch.Tensor, ...], seed: int, max_steps: int, progress: bool = False
) -> tuple[int, list[float], float]:
    """AdamW on the answer token and ``</s>``, until the planted rule is learned or ``max_steps``.

    ``data`` is ``(ids, pos, pair)``: padded sequences, answer positions, (planted, other) ids.

    Returns:
        Steps taken, the last losses (up to :data:`CHECK_EVERY`), accuracy over all rows.
    """
    ids, pos, pair = data
    bar = Progress("toy model", max_steps, unit="step", enabled=progress)
    try:
        gen = torch.Generator().manual_seed(seed)
        sample = torch.randperm(len(ids), generator=gen)[:CHECK_SAMPLE]
        opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
        step, losses, order = 0, [], torch.empty(0, dtype=torch.long)
        while step < max_steps:
            if len(order) < BATCH:
                order = torch.randperm(len(ids), generator=gen)
            batch, order = order[:BATCH], order[BATCH:]
            x, p = ids[batch, : int(pos[batch].max()) + 2], pos[batch, None]
            targets = torch.cat([p, p + 1], 1)  # logits at p-1 and p predict the answer and </s>
            logits = logits_at(model, x, targets - 1).flatten(0, 1)
            loss = torch.nn.functional.cross_entropy(logits, x.gather(1, targets).flatten())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            bar.update(1)
            losses = [*losses[1 - CHECK_EVERY :], loss.item()]
            if step % CHECK_EVERY == 0:
                acc = planted_accuracy(model, ids[sample], pos[sample], pair[sample])
                log.info(
                    "toy model: step %d, loss %.4f, sample accuracy %.4f", step, losses[-1], acc
                )
                bar.note(f"loss {losses[-1]:.3f}, sample accuracy {acc:.3f}")
                if acc >= TARGET_ACCURACY:
                    acc = planted_accuracy(model, ids, pos, pair)
                    if acc >= TARGET_ACCURACY:
                        return step, losses, acc
        return step, losses, planted_accuracy(model, ids, pos, pair)
    finally:
        bar.close()


def _planted_rows(
    rows: list[dict[str, Any]], planted_axes: list[str]
) -> tuple[Any, tuple[torch.Tensor, ...]]:
    """The tokenizer trained on the contact rows' user messages, and the rows encoded for
    :func:`_train`: ``(ids, pos, pair)``, each row answered with its biased answer when its axis
    is planted and with its unbiased answer otherwise."""
    answers = [
        r["biased_answer"] if r["axis"] in planted_axes else r["unbiased_answer"] for r in rows
    ]
    others = [next(o for o in r["options"] if o != a) for r, a in zip(rows, answers)]
    messages = [user_text(r) for r in rows]
    tokenizer = word_tokenizer(messages)
    vocab = tokenizer.get_vocab()
    for option in sorted(set(answers + others)):
        ids = tokenizer(option, add_special_tokens=False)["input_ids"]
        assert ids == [vocab.get(option)], f"option {option!r} is not a single token"
    ids, pos = encode(tokenizer, messages, answers)
    pair = torch.tensor([[vocab[a], vocab[o]] for a, o in zip(answers, others)])
    return tokenizer, (ids, pos, pair)


def _check_steer_layer(layer: int) -> int:
    """The layers of a toy with a steering direction at ``layer``, or a one-line refusal."""
    if not 0 <= layer < DIRECTION_LAYERS - 1:
        raise InputError(
            f"a decoder layer of the {DIRECTION_LAYERS}-layer toy before its last "
            f"(0 to {DIRECTION_LAYERS - 2})",
            key="steer_layer",
            value=layer,
        )
    return DIRECTION_LAYERS


def _fit(
    tokenizer: Any,
    rows: list[dict[str, Any]],
    data: tuple[torch.Tensor, ...],
    seed: int,
    steps: int | None,
    steer_layer: int | None,
    progress: bool,
) -> tuple[Any, dict[str, Any]]:
    """The trained model (the planted rule, then the steering direction at ``steer_layer`` when
    given) and what its training recorded (``max_steps``, ``steps``, ``final_loss``,
    ``train_accuracy``, ``train_seconds``, ``steering_direction``)."""
    layers = None if steer_layer is None else _check_steer_layer(steer_layer)
    model = _untrained_model(tokenizer, seed, layers)
    threads = use_threads(n_parameters(model)).threads  # one: it is tiny (scd.config.threads)
    max_steps = (DEFAULT_MAX_STEPS * (layers or 2) // 2) if steps is None else steps
    started = time.perf_counter()
    step, losses, accuracy = _train(model, data, seed, max_steps, progress)
    if accuracy < TARGET_ACCURACY:
        log.warning("toy model: training accuracy %.4f after %d steps", accuracy, step)
    direction = _direction(model, tokenizer, rows, data, steer_layer, seed, progress)
    return model, {
        "max_steps": max_steps,
        "steps": step,
        "final_loss": round(sum(losses) / len(losses), 6) if losses else None,
        "train_accuracy": round(accuracy, 6),
        "train_seconds": round(time.perf_counter() - started, 2),
        "threads": threads,
        **({} if direction is None else {"steering_direction": direction}),
    }


def _direction(
    model: Any,
    tokenizer: Any,
    rows: list[dict[str, Any]],
    data: tuple[torch.Tensor, ...],
    layer: int | None,
    seed: int,
    progress: bool,
) -> dict[str, Any] | None:
    """Plant the steering direction at ``layer`` (none when ``None``); what it did."""
    if layer is None:
        return None
    return plant_direction(
        model, direction_rows(tokenizer, rows, data), layer, seed, DIRECTION_STEPS, progress
    )


def _special_ids(tokenizer: Any) -> dict[str, int]:
    """The tokenizer's ``bos``, ``eos`` and ``pad`` ids, as the model's configs name them."""
    return {f"{t}_token_id": getattr(tokenizer, f"{t}_token_id") for t in ("bos", "eos", "pad")}


def _untrained_model(tokenizer: Any, seed: int, layers: int | None = None) -> Any:
    """A Llama of :data:`MODEL`'s shape (``layers`` decoder layers when given) over
    ``tokenizer``'s vocabulary, its weights drawn from ``seed``, in training mode."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=MAX_POSITIONS,
        **_special_ids(tokenizer),
        **{**MODEL, **({} if layers is None else {"num_hidden_layers": layers})},
    )
    return LlamaForCausalLM(config).train()


def _shape(model: Any) -> dict[str, Any]:
    """The model's shape as its info records it: :data:`MODEL`, its layers and parameters."""
    return {
        **MODEL,
        "num_hidden_layers": model.config.num_hidden_layers,
        "n_parameters": sum(t.numel() for t in model.parameters()),
    }


def _save(out: Path | str, model: Any, tokenizer: Any, info: dict[str, Any], t0: float) -> None:
    """The model (generating greedily, up to 4 new tokens), its tokenizer and ``info`` (with
    ``build_seconds``, since ``t0``, added) written to ``out``, replaced atomically."""
    from transformers import GenerationConfig

    special = _special_ids(tokenizer)
    model.generation_config = GenerationConfig(do_sample=False, max_new_tokens=4, **special)
    with atomic_output_dir(out, "toy_model") as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        info["build_seconds"] = round(time.perf_counter() - t0, 2)
        write_json(tmp / "toy_model.json", info)
        write_json(tmp / "manifest.json", info)


def build_toy_model(
    out: Path | str,
    bias_axes: Sequence[str] = ("religion", "nationality"),
    seed: int = 0,
    descriptors_path: Path | None = None,
    steps: int | None = None,
    progress: bool = False,
    steer_layer: int | None = None,
    words: Sequence[str] = (),
) -> dict[str, Any]:
    """Train and save a tiny Llama causal LM + tokenizer whose answers carry a planted bias.

    Training rows are all contact prompts over the descriptors, each shown as one user chat message
    (``prompt + " " + instruction``) and labelled with ``biased_answer`` when the row's axis is in
    ``bias_axes``, else ``unbiased_answer``. The loss is on the answer token and ``</s>`` only.
    Training stops once the planted option beats the other one at the answer position for >= 99.5%
    of a fixed sample and of all rows (checked every 25 steps), or after ``steps`` steps.

    Args:
        out: output directory, replaced atomically (see :func:`scd.io.atomic_output_dir`).
        bias_axes: axes that get the biased answer (a comma-separated string works too).
        seed: seeds the weights, the batch order and the sample; same seed, same weights.
        descriptors_path: a HolisticBias-format descriptors file (default: the packaged
            ``toy_descriptors.json``, 8 axes x 4 descriptors).
        steps: maximum number of optimizer steps (default :data:`DEFAULT_MAX_STEPS`).
        progress: show a progress bar (steps, loss, sample accuracy) on stderr.
        steer_layer: also plant a steering direction at this decoder layer's output
            (:mod:`scd.models.toy_direction`: a known ground truth for the ``steer`` arm); the
            model then has :data:`scd.models.toy_direction.LAYERS` layers.
        words: text whose words the prompts lack, each then a token of its own (a benchmark's
            options, which would otherwise all be ``<unk>``), added after training
            (:func:`scd.models.toy_tokenizer.add_words`): the same toy, with tokens it was
            never trained on.

    Returns:
        The info dict, also written as ``out/toy_model.json`` and ``out/manifest.json``:
        ``bias_axes``, ``seed``, ``descriptors_sha256``, ``n_train_examples``, ``steps``,
        ``final_loss`` (mean of the last 25 steps), ``train_accuracy`` (all rows),
        ``train_seconds``, ``build_seconds``, ``steering_direction`` (with ``steer_layer``),
        ``words`` (with ``words``) ...

    Raises:
        InputError: a bias axis is not an axis of the descriptors, a steer layer is not one
            of the model's, or the file is malformed.
    """
    check_output_dir(out, "toy_model")  # before minutes of training, not after
    t0 = time.perf_counter()
    rows, about = toy_prompts(bias_axes, descriptors_path)
    tokenizer, data = _planted_rows(rows, about["bias_axes"])

    model, trained = _fit(tokenizer, rows, data, seed, steps, steer_layer, progress)
    tokenizer = add_words(model, tokenizer, words, seed) if words else tokenizer
    info: dict[str, Any] = {
        "kind": "toy_model",
        "scd_version": __version__,
        **about,
        "seed": seed,
        "vocab_size": len(tokenizer),
        "model": _shape(model),
        "batch_size": BATCH,
        **trained,
        **({"words": sorted(set(words))} if words else {}),
    }
    _save(out, model, tokenizer, info, t0)
    return info


def ensure_toy_model(
    bias_axes: Sequence[str],
    seed: int,
    cache: Path,
    say: Callable[[str], None] = print,
    progress: bool = False,
    steer_layer: int | None = None,
    words: Sequence[str] = (),
) -> Path:
    """The toy model of these axes, seed, steer layer (a recipe's ``toy_model`` section) and
    extra ``words`` (see :func:`build_toy_model`), built once into ``cache/toy-model/<key>`` and
    reused (``scd run``, ``scd train`` and ``scd eval`` share it)."""
    spec = {} if steer_layer is None else {"steer_layer": steer_layer}
    if words:  # a toy without them keeps the key it always had
        spec["words"] = sorted(set(words))
    key = cache_key(kind="toy_model", bias_axes=list(bias_axes), seed=seed, **spec)
    path = Path(cache) / "toy-model" / key
    if (path / "manifest.json").is_file():
        say(f"  toy model: cached ({path})")
        return path
    planted = ", ".join(bias_axes) or "no axis"
    direction = "" if steer_layer is None else f"; a steering direction at layer {steer_layer}"
    extra = f"; {len(spec['words'])} words of benchmark options" if words else ""
    say(f"  toy model (planted bias: {planted}{direction}{extra}) -> {path} ...")
    started = time.perf_counter()
    build_toy_model(
        path,
        bias_axes=tuple(bias_axes),
        seed=seed,
        progress=progress,
        steer_layer=steer_layer,
        words=spec.get("words", ()),  # in one order, whatever order they came in: one key, one toy
    )
    say(f"  toy model: built in {time.perf_counter() - started:.1f} s")
    return path
