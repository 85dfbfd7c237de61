"""What the trainer of every method shares (:func:`scd.train.method_trainer.build_trainer`: SFT,
DPO, KTO and the methods registered beside them), each handed the part of the training spec
(:class:`~scd.train.spec.TrainingSpec`) it reads: the LoRA config, TRL's config, the model to
train, and scd's progress lines instead of the libraries' own."""

from __future__ import annotations

import sys
from typing import Any

from scd.config.schema import LoraSpec, TrainSpec
from scd.config.threads import n_parameters, use_threads
from scd.errors import InputError, first_line
from scd.train.arms import padding_free_problem
from scd.train.spec import TrainingSpec
from scd.train.training_log import log_lines

__all__ = [
    "cut_to_max_length",
    "load_model",
    "lora_config",
    "padding_free_keys",
    "quiet_callbacks",
    "score_labelled_tokens_only",
    "trl_config",
]


def lora_config(lora: LoraSpec) -> Any:
    """PEFT LoraConfig of the recipe's ``lora`` keys: plain LoRA that vLLM can serve."""
    from peft import LoraConfig

    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        bias="none",
        use_dora=False,
        task_type="CAUSAL_LM",
    )


def padding_free_keys(method: Any, train: TrainSpec) -> dict[str, Any]:
    """TRL's keys for ``train.padding_free``: the method's batches reach the model without pad
    tokens (TRL's padding-free collation: a batch is one sequence, each row with its own
    positions and causal block), the same rows, steps and losses as padded batches (tested).
    TRL takes no ``max_length`` with it (unless packing): :func:`cut_to_max_length` cuts the
    rows as TRL's padded path does.

    Raises:
        InputError: ``train.padding_free: true`` for a method without it."""
    if not train.padding_free:
        return {"padding_free": False}
    problem = padding_free_problem([method.name])  # scd train checks it first (check_run)
    if problem:
        raise InputError(problem)
    cut = not train.packing  # TRL refuses max_length there; scd cuts the rows
    return {"padding_free": True, **({"max_length": None} if cut else {})}


def cut_to_max_length(trainer: Any, max_length: int) -> None:
    """Cut the rows of a padding-free trainer (TRL tokenized them without ``max_length``) as
    TRL's padded path does: the first ``max_length`` tokens of each row (TRL's ``keep_start``),
    then rows with no trained token dropped (TRL drops them whether or not a row was cut)."""
    from functools import partial

    for name in ("train_dataset", "eval_dataset"):
        data = getattr(trainer, name)
        if not hasattr(data, "column_names"):  # None, or several eval datasets (not scd's)
            continue
        if max(map(len, data["input_ids"]), default=0) > max_length:
            columns = tuple(c for c in ("input_ids", "labels") if c in data.column_names)
            data = data.map(partial(_first_tokens, n=max_length, columns=columns))
        if "labels" in data.column_names:
            data = data.filter(lambda row: any(x != -100 for x in row["labels"]))
        setattr(trainer, name, data)


def _first_tokens(row: dict[str, Any], n: int, columns: tuple[str, ...]) -> dict[str, Any]:
    return {column: row[column][:n] for column in columns}


def trl_config(
    spec: TrainingSpec,
    cls: Any,
    cuda: bool,
    report_to: str,
    progress: bool = True,
    **extra: Any,
) -> Any:
    """A TRL config (``SFTConfig``, ``DPOConfig``, ``KTOConfig``) of the spec: its ``train``
    keys as they are (TRL's own names; those the class lacks, as ``packing`` for DPO, are left
    out), and what scd decides -- CPU runs drop bf16, paged optimizers and checkpointing."""
    import dataclasses

    keys = dataclasses.asdict(spec.train)
    keys.update(keys.pop("trl"))  # the recipe's other keys of TRL's configs, by their names
    del keys["device"]  # scd's own: where training runs
    for key in ("push_to_hub", "hub_model_id", "hub_private_repo"):
        del keys[key]  # scd uploads the adapter it kept (the trainer: its checkpoint folder)
    keys["per_device_eval_batch_size"] = (
        keys["per_device_eval_batch_size"] or keys["per_device_train_batch_size"]
    )
    if not cuda:
        keys.update(bf16=False, gradient_checkpointing=False)
        if keys["optim"].startswith("paged_"):
            keys["optim"] = "adamw_torch"
    known = {f.name for f in dataclasses.fields(cls)}
    keys = {k: v for k, v in {**keys, **extra}.items() if k in known}
    one_sequence = bool(keys.get("padding_free") or keys.get("packing"))  # no pad tokens
    try:
        return cls(
            output_dir=str(spec.output_dir / "checkpoints"),
            **keys,
            fp16=False,
            use_cpu=not cuda,
            data_seed=keys["seed"],
            save_strategy="steps",
            eval_strategy="steps" if keys["eval_steps"] else "no",
            report_to=report_to,
            project=spec.wandb.project,  # transformers' own default is "huggingface"
            run_name=spec.wandb.run_name or spec.output_dir.name,
            # batches without pad tokens carry no attention mask: transformers would count
            # the tokens that are not the pad id, and miss each row's end token where pad = end
            include_num_input_tokens_seen="all" if one_sequence else "non_padding",
            dataloader_num_workers=0,
            disable_tqdm=not (progress and sys.stderr.isatty()),  # a log file: a line per log
        )
    except ValueError as err:  # TRL's and transformers' own checks across fields
        raise InputError(f"train: {cls.__name__} refuses these keys: {first_line(err)}") from None


def load_model(spec: TrainingSpec, model_path: str, cuda: bool) -> Any:
    """The model to train (``model_path``: the spec's model resolved): float32 on a CPU, bf16
    on CUDA, NF4 with ``quantization: 4bit``; torch's threads set for its size."""
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    compute = torch.bfloat16 if cuda and spec.train.bf16 else torch.float32
    kwargs: dict[str, Any] = {"trust_remote_code": False, "dtype": compute}
    if spec.quantization == "4bit":
        from accelerate import PartialState
        from peft import prepare_model_for_kbit_training

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_compute_dtype=compute,
            bnb_4bit_use_double_quant=True,
        )
        kwargs["device_map"] = {"": PartialState().local_process_index if cuda else "cpu"}
    try:
        model = AutoModelForCausalLM.from_pretrained(model_path, **kwargs)
    except (OSError, ValueError) as err:
        first = first_line(err)
        raise InputError(f"model {spec.model}: cannot load a causal LM ({first})") from None
    if spec.quantization == "4bit":
        model = prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=spec.train.gradient_checkpointing and cuda
        )
    use_threads(n_parameters(model))  # torch's threads for its size (scd.config.threads)
    return model


def quiet_callbacks(trainer: Any, progress: bool, verbose: bool) -> None:
    """scd's progress lines instead of the libraries' own bar and log dicts (``verbose``:
    theirs)."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    if not verbose:  # the libraries' own: a bar, or every log dict as it is
        trainer.remove_callback(PrinterCallback)
        trainer.remove_callback(ProgressCallback)
        if progress:
            trainer.add_callback(log_lines(bar=sys.stderr.isatty()))


def score_labelled_tokens_only() -> bool:
    """On a CPU, let TRL's fused LM head score only the tokens that carry a label, as it does on
    CUDA; return whether TRL's head now does so.

    TRL 1.16's trainers (SFT, DPO, KTO) compute each token's log-probability through a fused LM
    head. On CUDA it projects only the positions whose label is not -100 ("compact"); elsewhere
    it projects every position, so that a compiler (AWS Neuron) sees one tile shape. A CPU
    compiles nothing, and an SCD row has a label on a few of its ~70 tokens: the head's matrix
    product and its log-softmax over the whole vocabulary ran for every other token, about a
    third of a SmolLM2 step (BENCHMARKS.md, "Training as a share of the machine"). The losses
    and gradients are the same either way (masked positions contribute 0). Nothing is changed
    in another TRL, whose code may differ: there the head stays as it is."""
    try:
        from trl.kernels import chunked_logprob
        from trl.trainer import utils
    except ImportError:  # another TRL
        return False
    original = getattr(chunked_logprob, "_use_triton", None)
    current = getattr(utils, "_use_triton", None)
    if getattr(current, "scd_cpu_compact", False):
        return True  # done already in this process
    if original is None or current is not original:  # not the TRL this was written for
        return False

    def compact(device: Any) -> bool:  # which positions the head projects, nothing else
        return device.type == "cpu" or original(device)

    compact.scd_cpu_compact = True  # type: ignore[attr-defined]
    utils._use_triton = compact
    return True
