"""GGUF checkpoints as ordinary Hugging Face model directories, converted once and cached.

A ``.gguf`` file (llama.cpp's format: quantized weights, the tokenizer and usually the chat
template in one file) is dequantized by transformers (``from_pretrained(..., gguf_file=...)``,
needs the ``gguf`` package) and saved as a plain directory -- float32 safetensors, tokenizer, chat
template, generation config -- so that the hf engine, PEFT, TRL and vLLM all see an ordinary
model. The directory is keyed by the file's sha256::

    $SCD_MODEL_CACHE/gguf/<file stem>-<sha256[:16]>/
        config.json  model.safetensors  tokenizer.json  tokenizer_config.json  ...
        manifest.json     source file, sha256, architecture, quantization types, timings

The conversion asks transformers to dequantize every weight, saves the model (with no GGUF
quantizer attached: transformers refuses to save a model that has one), and checks that the saved
directory, loaded again, gives the GGUF model's logits on a probe -- one copy of the weights in
memory at a time (Qwen2.5-Coder-1.5B: 9.2 GB at the peak). The file is checked before the slow
part: a truncated or corrupt file, an architecture transformers cannot read or a quantization
type ``gguf`` cannot dequantize is one :class:`~scd.errors.InputError` naming the file, and
nothing is left in the cache (the directory is written beside its final place and renamed when
complete).
"""

from __future__ import annotations

import contextlib
import gc
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scd import __version__
from scd.errors import InputError, first_line
from scd.io import atomic_output_dir, model_cache, sha256_file, write_json

__all__ = ["convert_gguf", "inspect_gguf"]

PROBE_TEXT = "The quick brown fox jumps over the lazy dog."


def _field(reader: Any, key: str) -> Any:
    try:
        return reader.fields[key].contents()
    except Exception:  # a missing or malformed field  # noqa: BLE001
        return None


def inspect_gguf(path: Path | str) -> dict[str, Any]:
    """Read a GGUF file's header and check that scd can convert it, without loading weights;
    what it read as a JSON-serialisable dict.

    Raises:
        InputError: not a GGUF file, truncated, an architecture transformers cannot read, or a
            quantization type that ``gguf`` cannot dequantize.
    """
    path = Path(path)
    try:
        import gguf
        import numpy as np
        from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES
    except ImportError:
        raise InputError(
            f"{path}: reading GGUF files needs the gguf package (pip install gguf)"
        ) from None
    try:
        reader = gguf.GGUFReader(path)
        size = path.stat().st_size
        end = max((t.data_offset + int(t.n_bytes) for t in reader.tensors), default=0)
    except (ValueError, IndexError, OSError, KeyError) as err:
        first = first_line(err)
        raise InputError(
            f"{path}: not a complete GGUF file (truncated or corrupt: {first})"
        ) from None
    if not reader.tensors or end > size:
        raise InputError(f"{path}: not a complete GGUF file (truncated: {size:,} of {end:,} bytes)")
    arch = str(_field(reader, "general.architecture") or "")
    if arch not in GGUF_SUPPORTED_ARCHITECTURES:
        raise InputError(
            f"{path}: architecture {arch or '(none)'!r} cannot be read by transformers' GGUF "
            f"loader (it reads: {', '.join(sorted(GGUF_SUPPORTED_ARCHITECTURES))})"
        )
    types = sorted({t.tensor_type.name for t in reader.tensors})
    for name in types:
        qtype = gguf.GGMLQuantizationType[name]
        block, nbytes = gguf.GGML_QUANT_SIZES[qtype]
        try:
            gguf.dequantize(np.zeros((1, nbytes), dtype=np.uint8), qtype)
        except NotImplementedError:
            raise InputError(
                f"{path}: quantization type {name} cannot be dequantized by the gguf package "
                "(re-export the model as Q8_0, Q4_K_M, F16, ...)"
            ) from None
        except Exception:  # noqa: BLE001 -- a shape quirk of a supported type
            pass
    return dict(
        architecture=arch,
        name=_field(reader, "general.name"),
        tensor_types=types,
        n_tensors=len(reader.tensors),
        has_chat_template=reader.fields.get("tokenizer.chat_template") is not None,
        file_bytes=size,
    )


def _sha256(path: Path, root: Path, remember: bool = False) -> str:
    """The file's sha256, remembered per (absolute path, size, mtime) once a conversion of it
    exists, so that a multi-GB file is hashed once."""
    stat = path.stat()
    index = root / "sha256-index.json"
    key = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    try:
        known = json.loads(index.read_text())
    except (OSError, ValueError):
        known = {}
    digest = known.get(key) or sha256_file(path)
    if remember and key not in known:
        with contextlib.suppress(OSError):  # a read-only cache only costs the hash next time
            write_json(index, {**known, key: digest})
    return digest


def _slug(stem: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-.") or "model"


def convert_gguf(
    path: Path | str, *, say: Callable[[str], None] = print, cache: Path | None = None
) -> Path:
    """Return the cached plain Hugging Face directory of a GGUF file, converting it once.

    Args:
        path: a local ``.gguf`` file.
        say: where the one-line progress messages go (transformers shows a bar per tensor).
        cache: the cache root (default ``gguf/`` of :func:`scd.io.model_cache`).

    Raises:
        InputError: see :func:`inspect_gguf`; or the conversion itself failed.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise InputError(f"{path}: no such GGUF file")
    root = cache or model_cache() / "gguf"
    sha = _sha256(path, root)
    out = root / f"{_slug(path.stem)}-{sha[:16]}"
    if (out / "manifest.json").is_file():
        _sha256(path, root, remember=True)
        return out.resolve()
    info = inspect_gguf(path)
    types = "/".join(info["tensor_types"])
    say(f"converting {path.name} ({info['architecture']}, {types}) -> {out} (once; cached)")
    started = time.perf_counter()
    try:
        with atomic_output_dir(out, "gguf_conversion") as tmp:
            manifest = _convert(path, tmp, info, sha)
            manifest["convert_seconds"] = round(time.perf_counter() - started, 1)
            write_json(tmp / "manifest.json", manifest)
    except InputError:
        raise
    except Exception as err:  # transformers' GGUF loader raises many types  # noqa: BLE001
        first = first_line(err, 300)
        raise InputError(f"{path}: cannot convert this GGUF file ({first})") from None
    _sha256(path, root, remember=True)
    say(f"converted {path.name} in {time.perf_counter() - started:.0f} s")
    return out.resolve()


def _dequantized(path: Path) -> dict[str, Any]:
    """``from_pretrained``'s arguments that dequantize every weight: transformers >= 5.17 can
    keep a GGUF's weights packed in its own blocks (with the ``kernels`` package), which a plain
    directory cannot hold; older versions always dequantize."""
    try:
        from transformers import GgufConfig
    except ImportError:
        return {}
    return {"quantization_config": GgufConfig(gguf_file=path.name, dequantize=True)}


def _convert(path: Path, tmp: Path, info: dict[str, Any], sha: str) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        str(path.parent), gguf_file=path.name, trust_remote_code=False
    )
    ids = tokenizer(PROBE_TEXT, return_tensors="pt")["input_ids"]
    model = AutoModelForCausalLM.from_pretrained(
        str(path.parent),
        gguf_file=path.name,
        dtype=torch.float32,
        trust_remote_code=False,
        **_dequantized(path),
    ).eval()
    with torch.inference_mode():
        expected = model(input_ids=ids).logits
    # every weight is a float32 tensor: a plain model once no GGUF quantizer is attached
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.name_or_path = ""
    model.hf_quantizer = None
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    n_parameters = sum(p.numel() for p in model.parameters())
    del model  # the check loads the saved files: never two copies of the weights at once
    gc.collect()
    saved = AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32).eval()
    with torch.inference_mode():
        diff = float((expected - saved(input_ids=ids).logits).abs().max())
    if diff > 1e-4:
        raise RuntimeError(f"the saved model's logits differ from the GGUF model's by {diff:.2e}")
    return {
        "kind": "gguf_conversion",
        "scd_version": __version__,
        "source": str(path.resolve()),
        "source_sha256": sha,
        **info,
        "model_type": saved.config.model_type,
        "n_parameters": n_parameters,
        "saved_dtype": "float32",
        "probe_max_abs_logit_diff": diff,
    }
