"""A trained adapter's Hub repository: its model card and its upload (``train.push_to_hub`` with
``train.hub_model_id``, TRL's own names for them).

The card (huggingface_hub's :class:`~huggingface_hub.ModelCard`) names the base model and its
fingerprint, what the training did (method, steps, loss, the step kept and why) and the recipe
that trained the adapter; once ``scd run`` has evaluated it, each benchmark's numbers for the
base model and the adapter on the same items, with the paired test. The upload holds what
serving the adapter needs (its weights and config, the tokenizer and chat template) and the
card, recipe and manifests; never checkpoints, data or W&B folders.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from scd.io import atomic_file, looks_local, write_json
from scd.report.tuned import TunedResults
from scd.train.saving import SERVING_FILES

__all__ = ["CARD", "PUSHED", "card_text", "push_adapter"]

CARD = "README.md"
PUSHED = "hub.json"  # written in the adapter directory once its upload went through
UPLOADED = [f"{prefix}*" for prefix in SERVING_FILES] + [
    CARD,
    "recipe.yaml",
    "train_manifest.json",
    "data_manifest.json",
]


def _number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def _before_after(results: TunedResults) -> list[str]:
    lines = []
    for job, after in results.after.items():
        before = results.before.get(job, {})
        lines += [f"### {job}", "", "| measure | base model | this adapter |", "|---|---|---|"]
        lines += [
            f"| {key} | {_number(before.get(key))} | {_number(value)} |"
            for key, value in after.items()
        ]
        lines.append("")
    return lines


def card_text(adapter: Path | str, repo: str, results: TunedResults | None = None) -> str:
    """The model card of ``adapter`` (a ``scd train`` output directory) as the repository
    ``repo`` will show it; ``results``: its evaluations against the base model, if any."""
    from huggingface_hub import ModelCard, ModelCardData

    from scd.models import model_fingerprint

    adapter = Path(adapter)
    info = json.loads((adapter / "train_manifest.json").read_text())
    base, method = info["model"], info.get("method", "sft")
    data = ModelCardData(
        base_model=None if looks_local(base) or base == "toy" else base,
        library_name="peft",
        pipeline_tag="text-generation",
        tags=["scd", "social-bias", "lora", "trl", method],
    )
    selected = info.get("selected") or {}
    kept = f"step {selected['step']}: {selected['why']}" if selected else "the last step"
    lines = [
        f"# {repo}",
        "",
        f"A LoRA adapter of `{base}` trained with scd (Social Contact Debiasing): TRL's "
        f"{method.upper()} trainer, {info['global_step']} steps, mean training loss "
        f"{_number(info.get('train_loss'))}. Adapter kept: {kept}.",
        "",
        f"Base model fingerprint: `{model_fingerprint(info['base_model'])}`.",
        "",
        "## Before and after tuning",
        "",
    ]
    if results is not None and results.after:
        lines += [
            "Each benchmark on the same items for the base model and this adapter; `*_p`: "
            "the paired test against the base model.",
            "",
        ]
        lines += _before_after(results)
    else:
        lines += [
            "Not measured yet: `scd run` evaluates the adapters it trains against their "
            "base model on the same items, and their cards hold those numbers.",
            "",
        ]
    recipe = (adapter / "recipe.yaml").read_text() if (adapter / "recipe.yaml").is_file() else ""
    lines += [
        "## Recipe",
        "",
        "```yaml",
        recipe.rstrip(),
        "```",
        "",
        "## Use",
        "",
        "```python",
        "from peft import AutoPeftModelForCausalLM",
        "",
        f'model = AutoPeftModelForCausalLM.from_pretrained("{repo}")',
        "```",
        "",
    ]
    return str(ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines)))


def push_adapter(
    adapter: Path | str,
    repo: str,
    *,
    private: bool | None = None,
    results: TunedResults | None = None,
) -> str:
    """Write ``adapter``'s model card (:func:`card_text`) and upload the adapter to ``repo``
    (:func:`scd.hub.upload`); record the upload in ``adapter/hub.json``; return the URL."""
    from scd.hub import upload

    adapter = Path(adapter)
    with atomic_file(adapter / CARD) as tmp:
        tmp.write_text(card_text(adapter, repo, results), encoding="utf-8")
    measured = "with its before/after tables" if results and results.after else "trained"
    url = upload(
        adapter,
        repo,
        repo_type="model",
        key="train.hub_model_id",
        private=private,
        message=f"scd: adapter and model card ({measured})",
        allow=UPLOADED,
    )
    write_json(
        adapter / PUSHED,
        {"repo": repo, "url": url, "evaluated": sorted(results.after) if results else []},
    )
    return url
