"""``scd train RECIPE.yaml``: LoRA / QLoRA instruction tuning with TRL's SFTTrainer + PEFT.

The recipe maps onto TRL and PEFT's own config classes (``SFTConfig``, ``LoraConfig``,
``BitsAndBytesConfig``); nothing here re-implements training. Loss is on the completion only
(prompt/completion rows). Runs unchanged under ``accelerate launch`` and ``torchrun``.

Output directory::

    adapter_model.safetensors, adapter_config.json   the LoRA adapter (unmerged, vLLM-servable)
    tokenizer files                                  the tokenizer the adapter was trained with
    recipe.yaml                                      the resolved recipe (secrets redacted)
    data_manifest.json                               what the SFT data was and where it came from
    train_manifest.json                              metrics: steps, loss, tokens/s, runtime
    checkpoints/                                     resumable checkpoints (``--resume``)
    data/                                            SFT data generated for this run
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import yaml

from scd import __version__
from scd.errors import InputError
from scd.io import write_json
from scd.train.recipe import Recipe, recipe_to_dict
from scd.train.tracking import redact, start_run

__all__ = ["lora_config", "prepare_data", "sft_config", "train"]


def _is_cuda(recipe: Recipe) -> bool:
    import torch

    if recipe.train.device == "cpu":
        return False
    if recipe.train.device == "cuda" and not torch.cuda.is_available():
        raise InputError("train.device: cuda was asked for but no CUDA GPU is available")
    return torch.cuda.is_available()


def prepare_data(recipe: Recipe, out: Path) -> Path:
    """Return the SFT data directory of the run, generating it when the recipe asks for it."""
    from scd.data_gen.contact import write_prompts
    from scd.data_gen.descriptors import resolve_descriptors
    from scd.data_gen.sft import write_sft

    d = recipe.data
    if d.sft:
        if not (Path(d.sft) / "train.parquet").is_file():
            raise InputError(f"data.sft {d.sft}: no train.parquet (run `scd generate sft`)")
        return Path(d.sft)
    prompts, eval_prompts = d.prompts, d.eval_prompts
    if d.descriptors:
        prompts = out / "data" / "prompts"
        write_prompts(prompts, resolve_descriptors(d.descriptors, version=d.hb_version))
        if d.setting == 2 and not eval_prompts:
            eval_prompts = out / "data" / "eval_prompts"
            write_prompts(eval_prompts, resolve_descriptors(d.eval_descriptors or "stigma"))
    sft = out / "data" / "sft"
    write_sft(prompts, d.setting, sft, eval_prompts=eval_prompts, style=d.style,
              max_train=d.max_train, max_eval=d.max_eval, general=d.general,
              general_fraction=d.general_fraction, seed=d.seed)  # fmt: skip
    return sft


def lora_config(recipe: Recipe) -> Any:
    """PEFT LoraConfig of the recipe: plain LoRA that vLLM can serve."""
    from peft import LoraConfig

    return LoraConfig(
        r=recipe.lora.r,
        lora_alpha=recipe.lora.alpha,
        lora_dropout=recipe.lora.dropout,
        target_modules=recipe.lora.target_modules,
        bias="none",
        use_dora=False,
        task_type="CAUSAL_LM",
    )


def sft_config(recipe: Recipe, out: Path, cuda: bool, report_to: str, progress: bool = True) -> Any:
    """TRL SFTConfig of the recipe; CPU runs drop bf16, paged optimizers and checkpointing."""
    from trl import SFTConfig

    t = recipe.train
    optim = t.optim if cuda or not t.optim.startswith("paged_") else "adamw_torch"
    return SFTConfig(
        output_dir=str(out / "checkpoints"),
        num_train_epochs=t.epochs,
        max_steps=t.max_steps,
        per_device_train_batch_size=t.batch_size,
        per_device_eval_batch_size=t.batch_size,
        gradient_accumulation_steps=t.grad_accum,
        learning_rate=t.learning_rate,
        lr_scheduler_type=t.lr_scheduler,
        warmup_steps=t.warmup_ratio,  # a float < 1 is a ratio in transformers 5
        max_grad_norm=t.max_grad_norm,
        weight_decay=t.weight_decay,
        gradient_checkpointing=t.gradient_checkpointing and cuda,
        optim=optim,
        bf16=t.bf16 and cuda,
        fp16=False,
        use_cpu=not cuda,
        seed=t.seed,
        data_seed=t.seed,
        max_length=t.max_length,
        packing=t.packing,
        padding_free=t.padding_free,
        completion_only_loss=True,
        logging_steps=t.logging_steps,
        save_strategy="steps",
        save_steps=t.save_steps,
        save_total_limit=t.save_total_limit,
        eval_strategy="steps" if t.eval_steps else "no",
        eval_steps=t.eval_steps,
        report_to=report_to,
        run_name=recipe.wandb.run_name or Path(recipe.output_dir).name,
        include_num_input_tokens_seen="non_padding",
        dataloader_num_workers=0,
        disable_tqdm=not progress,
    )


def _load_model(recipe: Recipe, cuda: bool) -> Any:
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    kwargs: dict[str, Any] = {"trust_remote_code": False}
    compute = torch.bfloat16 if cuda and recipe.train.bf16 else torch.float32
    if recipe.quantization == "4bit":
        from peft import prepare_model_for_kbit_training

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_compute_dtype=compute,
            bnb_4bit_use_double_quant=True,
        )
        kwargs["device_map"] = {"": _device_index() if cuda else "cpu"}
    kwargs["dtype"] = compute
    try:
        model = AutoModelForCausalLM.from_pretrained(recipe.model, **kwargs)
    except (OSError, ValueError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise InputError(f"model {recipe.model}: cannot load a causal LM ({first})") from None
    if recipe.quantization == "4bit":
        model = prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=recipe.train.gradient_checkpointing and cuda
        )
    return model


def _device_index() -> int:
    from accelerate import PartialState

    return PartialState().local_process_index


def _last_checkpoint(out: Path) -> str | None:
    """The newest complete checkpoint: one whose ``trainer_state.json`` (written last) parses.

    A run killed while writing a checkpoint leaves a partial directory; resuming skips it.
    """
    ckpt = out / "checkpoints"
    if not ckpt.is_dir():
        return None
    steps = []
    for path in ckpt.glob("checkpoint-*"):
        if path.name.removeprefix("checkpoint-").isdigit():
            steps.append((int(path.name.removeprefix("checkpoint-")), path))
    for _, path in sorted(steps, reverse=True):
        try:
            json.loads((path / "trainer_state.json").read_text())
        except (OSError, ValueError):
            continue
        return str(path)
    return None


def train(
    recipe: Recipe, *, resume: bool = False, use_wandb: bool = True, progress: bool = True
) -> dict[str, Any]:
    """Run one recipe; return the training manifest (also written to the output dir).

    ``progress=False`` drops the progress bar and its printed log lines (W&B still gets them).
    """
    from accelerate import PartialState
    from datasets import load_dataset
    from transformers import AutoTokenizer
    from trl import SFTTrainer

    if recipe.output_dir is None:
        raise InputError("recipe: output_dir: needed by scd train (scd run chooses its own)")
    if recipe.model == "toy":
        raise InputError(
            "model: toy is built by `scd run`; for scd train build it with "
            "`scd toy-model --out DIR` and set model: DIR"
        )
    state = PartialState()
    out = Path(recipe.output_dir)
    checkpoint = _last_checkpoint(out)
    if checkpoint and not resume:
        raise InputError(f"output_dir {out}: holds checkpoints; pass --resume to continue, "
                         "or choose a new output_dir")  # fmt: skip
    cuda = _is_cuda(recipe)
    with state.main_process_first():
        sft_dir = prepare_data(recipe, out) if state.is_main_process else None
    sft_dir = sft_dir or (Path(recipe.data.sft) if recipe.data.sft else out / "data" / "sft")
    files = {"train": str(sft_dir / "train.parquet"), "eval": str(sft_dir / "eval.parquet")}
    data = load_dataset("parquet", data_files=files)
    data = data.select_columns(["prompt", "completion"])
    try:
        tokenizer = AutoTokenizer.from_pretrained(recipe.model, trust_remote_code=False)
    except (OSError, ValueError) as err:
        raise InputError(f"model {recipe.model}: cannot load its tokenizer ({err})") from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    manifest = json.loads((sft_dir / "manifest.json").read_text())
    resolved = redact(recipe_to_dict(recipe))
    enabled = use_wandb and recipe.wandb.enabled
    run = None
    if enabled and state.is_main_process:
        run = start_run(project=recipe.wandb.project, name=recipe.wandb.run_name or out.name,
                        group=recipe.wandb.group, entity=recipe.wandb.entity,
                        config={"recipe": resolved, "data_manifest": manifest},
                        directory=out / "wandb")  # fmt: skip
    model = _load_model(recipe, cuda)
    trainer = SFTTrainer(
        model=model,
        args=sft_config(recipe, out, cuda, "wandb" if enabled else "none", progress),
        train_dataset=data["train"],
        eval_dataset=data["eval"] if recipe.train.eval_steps else None,
        processing_class=tokenizer,
        peft_config=lora_config(recipe),
    )
    if not progress:
        from transformers.trainer_callback import PrinterCallback

        trainer.remove_callback(PrinterCallback)  # it prints every log dict without the bar
    start = time.perf_counter()
    result = trainer.train(resume_from_checkpoint=checkpoint if resume else None)
    seconds = time.perf_counter() - start
    trainer.save_model(str(out))
    info: dict[str, Any] = {}
    if state.is_main_process:
        tokenizer.save_pretrained(str(out))
        tokens = int(trainer.state.num_input_tokens_seen)
        info = {
            "kind": "scd_adapter",
            "scd_version": __version__,
            "base_model": recipe.model,
            "global_step": trainer.state.global_step,
            "train_loss": result.training_loss,
            "train_seconds": round(seconds, 3),
            "tokens_seen": tokens,
            "tokens_per_second": round(tokens / seconds, 1) if seconds > 0 else None,
            "resumed_from": Path(checkpoint).name if checkpoint and resume else None,
            "world_size": state.num_processes,
        }
        (out / "recipe.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False))
        write_json(out / "data_manifest.json", manifest)
        write_json(out / "train_manifest.json", info)
        if run is not None:
            run.summary.update({f"scd/{k}": v for k, v in info.items() if v is not None})
            if recipe.wandb.log_adapter:
                import wandb

                artifact = wandb.Artifact(f"adapter-{out.name}", type="model", metadata=info)
                for name in ("adapter_model.safetensors", "adapter_config.json"):
                    artifact.add_file(str(out / name))
                run.log_artifact(artifact)
            run.finish()
    state.wait_for_everyone()
    return info
