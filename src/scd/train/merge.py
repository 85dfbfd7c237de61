"""``scd merge --adapter DIR --out DIR``: fold a LoRA adapter into its base model.

The base is always reloaded in full precision (bf16 on CUDA, float32 on CPU) -- also for an adapter
trained on a 4-bit base, since merging into quantized weights loses precision.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from scd.errors import InputError, first_line
from scd.io import atomic_output_dir, write_json

__all__ = ["merge_adapter"]


def merge_adapter(adapter: Path | str, out: Path | str, base: str | None = None) -> dict[str, Any]:
    """Merge ``adapter`` into its base (``base`` or the adapter's ``base_model_name_or_path``)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from scd.eval.engines import require_adapter
    from scd.models import resolve_model

    adapter = Path(adapter)
    require_adapter(adapter)
    config_path = adapter / "adapter_config.json"
    config = json.loads(config_path.read_text())
    if base:
        base = resolve_model(base, key="--base")  # a GGUF file is converted once
    else:
        recorded = config.get("base_model_name_or_path")
        if not recorded:
            raise InputError(f"{config_path}: no base_model_name_or_path; pass --base")
        try:
            base = resolve_model(recorded, key="base_model_name_or_path")
        except InputError as err:
            raise InputError(f"{config_path}: {err}; pass --base") from None
    dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
    try:
        model = AutoModelForCausalLM.from_pretrained(base, dtype=dtype, trust_remote_code=False)
    except (OSError, ValueError) as err:
        raise InputError(f"base model {base}: cannot load ({first_line(err)})") from None
    try:
        merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    except (RuntimeError, ValueError, KeyError) as err:
        raise InputError(
            f"does not fit {base} ({first_line(err)})", key="adapter", value=adapter
        ) from None
    tok_source = adapter if (adapter / "tokenizer_config.json").is_file() else base
    tokenizer = AutoTokenizer.from_pretrained(str(tok_source), trust_remote_code=False)
    info = {
        "kind": "merged_model",
        "base_model": base,
        "adapter": str(adapter),
        "dtype": str(dtype).removeprefix("torch."),
    }
    with atomic_output_dir(out, "merged_model") as tmp:
        merged.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        write_json(tmp / "manifest.json", info)
    return info
