"""Recipes are data: every YAML under recipes/ loads, validates and names its command."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from scd.cli import main
from scd.config.checks import recipe_warnings
from scd.errors import InputError
from scd.eval.engines import engine_spec
from scd.eval.engines.vllm_setup import LORA_RANKS as VLLM_LORA_RANKS
from scd.pipeline.recipe import load_recipe

REPO = Path(__file__).resolve().parents[2]
RECIPES = sorted((REPO / "recipes").rglob("*.yaml"))


def test_there_are_recipes_for_both_models_and_all_settings() -> None:
    names = {p.relative_to(REPO / "recipes").as_posix() for p in RECIPES}
    assert "quickstart.yaml" in names
    for model in ("llama-2-13b-chat", "llama-2-7b-chat"):
        assert {f"{model}/setting{n}.yaml" for n in range(1, 9)} <= names
        assert f"{model}/all-settings.yaml" in names
    arenas = {
        "arena-quickstart.yaml",
        "smollm2-135m-instruct/arena.yaml",
        "qwen2.5-coder-1.5b-instruct/arena.yaml",
        "llama-2-13b-chat/arena.yaml",
    }
    assert arenas <= names


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_recipe_validates_and_opens_with_its_command(path: Path) -> None:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# scd ") and path.relative_to(REPO).as_posix() in first
    recipe = load_recipe(path)
    assert recipe.lora.r in VLLM_LORA_RANKS
    if "llama-2" in path.as_posix():
        if path.stem == "all-settings":
            assert recipe.run.settings == list(range(1, 9)) and recipe.eval.bbq.enabled
        elif path.stem == "arena":
            assert recipe.arm_names == ["base", "prompt", "general", "sft", "dpo", "kto"]
        else:
            assert recipe.data.setting == int(path.stem.removeprefix("setting"))
        # the paper's public code
        t = recipe.train
        assert (recipe.lora.r, recipe.lora.alpha, recipe.lora.dropout) == (64, 16, 0.1)
        # constant, as the paper ran it: its 3% warmup had no effect under transformers'
        # constant schedule, so the recipe states 0 (and loading it warns about nothing)
        assert (t.learning_rate, t.lr_scheduler_type, t.warmup_steps) == (3e-4, "constant", 0.0)
        assert recipe_warnings(recipe) == []
        assert (
            t.per_device_train_batch_size,
            t.gradient_accumulation_steps,
            t.max_grad_norm,
            t.num_train_epochs,
        ) == (6, 2, 0.3, 1.0)
        assert (t.optim, t.bf16, t.seed, t.gradient_checkpointing) == (
            "paged_adamw_32bit",
            True,
            42,
            True,
        )
        assert recipe.data.general_fraction == 0.1
    if "13b" in path.as_posix():
        assert recipe.quantization == "4bit"


def test_accelerate_configs_parse() -> None:
    configs = {
        p.stem: yaml.safe_load(p.read_text()) for p in (REPO / "configs/accelerate").glob("*.yaml")
    }
    assert set(configs) == {"single_gpu", "multi_gpu", "fsdp", "zero2", "zero3"}
    assert configs["multi_gpu"]["distributed_type"] == "MULTI_GPU"
    assert configs["zero3"]["deepspeed_config"]["zero_stage"] == 3


def _recipe(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text("model: m\noutput_dir: o\ndata: {descriptors: toy}\n" + text)
    return path


def test_unknown_keys_and_wrong_types_name_key_and_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"recipe.yaml: unknown key 'train.lr'"):
        load_recipe(_recipe(tmp_path, "train: {lr: 0.1}\n"))
    with pytest.raises(InputError, match=r"recipe.yaml: train.learning_rate: expected a number"):
        load_recipe(_recipe(tmp_path, "train: {learning_rate: fast}\n"))
    assert load_recipe(_recipe(tmp_path, "lora: {r: 12}\n")).lora.r == 12  # vLLM: max rank 16
    above = r"lora.r: 640 is above the largest rank the vllm engine serves \(512\)"
    with pytest.raises(InputError, match=above):
        load_recipe(_recipe(tmp_path, "lora: {r: 640}\neval: {backend: vllm}\n"))
    assert load_recipe(_recipe(tmp_path, "lora: {r: 640}\n")).lora.r == 640  # hf serves any
    with pytest.raises(InputError, match="max_seq_length"):
        load_recipe(_recipe(tmp_path, "train: {max_seq_length: 512}\n"))


def test_train_takes_any_key_of_trl_s_config_checked_by_its_type(tmp_path: Path) -> None:
    """train: takes TRL's own fields beyond scd's list (SFTConfig's; DPOConfig's for the arms),
    typed as TRL types them, held fixed for the run, and on to TRL's config; scd's own settings
    are refused."""
    from scd.config.loader import fixed_part
    from scd.train.method_trainer import sft_config
    from scd.train.spec import TrainingSpec

    text = "train: {adam_beta2: 0.95, neftune_noise_alpha: 5, lr_scheduler_type: cosine}\n"
    keys = ["train.weight_decay=0.01", "train.label_smoothing=0.1"]
    recipe = load_recipe(_recipe(tmp_path, text), keys)
    trl = {"adam_beta2": 0.95, "neftune_noise_alpha": 5.0, "label_smoothing": 0.1}
    assert recipe.train.trl == trl
    assert fixed_part(recipe.to_dict())["train"]["adam_beta2"] == 0.95  # a run holds it
    args = sft_config(TrainingSpec.of(recipe), cuda=False, report_to="none", progress=False)
    assert (args.adam_beta2, args.neftune_noise_alpha, args.weight_decay) == (0.95, 5.0, 0.01)
    assert not hasattr(args, "label_smoothing")  # a DPOConfig field: for the dpo arm only
    bad = {
        "train: {adam_beta2: high}": "train.adam_beta2: expected a number, got 'high'",
        "train: {adam_beta22: 0.9}": "unknown key 'train.adam_beta22' (did you mean "
        "'train.adam_beta2'?)",
        "train: {report_to: none}": "train.report_to: scd sets this key of TRL's config",
        "train: {eval_strategy: steps}": "train.eval_strategy: scd sets this key",
        "train: {beta: 0.5}": "train.beta: scd sets this key",  # arena.beta
        "train: {hub_token: hf_x}": "train.hub_token: scd sets this key",  # HF_TOKEN only
        "train: {load_best_model_at_end: true, save_steps: 7, eval_steps: 5}": (
            "train: SFTConfig refuses these keys"
        ),
    }
    for body, message in bad.items():
        with pytest.raises(InputError, match=re.escape(message)):
            recipe = load_recipe(_recipe(tmp_path, body + "\n"))
            sft_config(TrainingSpec.of(recipe), cuda=False, report_to="none", progress=False)
    both = load_recipe(_recipe(tmp_path, "train: {loss_type: [sigmoid, sft]}\n"))  # DPO's list
    assert both.train.trl["loss_type"] == ["sigmoid", "sft"]


def test_overrides_are_typed(tmp_path: Path) -> None:
    path = _recipe(tmp_path, "")
    recipe = load_recipe(path, ["train.learning_rate=1e-4", "lora.r=16", "wandb.enabled=false"])
    assert recipe.train.learning_rate == 1e-4 and recipe.lora.r == 16
    assert recipe.wandb.enabled is False
    with pytest.raises(InputError, match="train.per_device_train_batch_size: expected an int"):
        load_recipe(path, ["train.per_device_train_batch_size=big"])


def test_bad_recipe_on_the_command_line_is_one_line(tmp_path: Path, capsys) -> None:
    assert main(["train", str(_recipe(tmp_path, "colour: blue\n"))]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown key 'colour'" in err and "recipe.yaml" in err


def test_every_problem_of_a_recipe_is_reported_at_once(tmp_path: Path, capsys) -> None:
    bad = "train:\n  max_length: 0\nlora:\n  dropout: 1.5\neval:\n  dtype: float8\n"
    assert main(["train", str(_recipe(tmp_path, bad))]) == 2
    lines = capsys.readouterr().err.splitlines()
    keys = ("lora.dropout", "train.max_length", "eval.dtype")  # in the recipe's key order
    assert len(lines) == 3 and "Traceback" not in "".join(lines), lines
    for line, key in zip(lines, keys):
        assert line.startswith("scd: error: ") and "recipe.yaml" in line and f" {key}: " in line


def test_constant_schedule_with_warmup_warns(tmp_path: Path) -> None:
    from scd.pipeline.recipe import recipe_from_dict

    base = {"model": "toy", "data": {"descriptors": "toy"}}
    recipe = recipe_from_dict({**base, "train": {"warmup_steps": 0.03}})
    (warning,) = recipe_warnings(recipe)
    assert "ignores train.warmup_steps 0.03" in warning and "constant_with_warmup" in warning
    both = {"warmup_steps": 0.03, "lr_scheduler_type": "constant_with_warmup"}
    assert recipe_warnings(recipe_from_dict({**base, "train": both})) == []


def test_old_key_names_still_work_with_a_one_line_notice(tmp_path: Path) -> None:
    said: list[str] = []
    old = _recipe(
        tmp_path,
        "train: {epochs: 2, batch_size: 3, grad_accum: 4, lr_scheduler: "
        "linear, warmup_ratio: 0.1}\neval: {seed: 7, stigma: {probes: [sds], "
        "limit_conditions: 2}}\n",
    )
    recipe = load_recipe(old, ["train.epochs=3"], say=said.append)
    t = recipe.train
    assert (
        t.num_train_epochs,
        t.per_device_train_batch_size,
        t.gradient_accumulation_steps,
        t.lr_scheduler_type,
        t.warmup_steps,
    ) == (3, 3, 4, "linear", 0.1)
    assert recipe.eval.sds.enabled and recipe.eval.sds.limit_conditions == 2
    assert not recipe.eval.aq27.enabled
    assert recipe.eval.bias.seed == recipe.eval.bbq.seed == 7
    assert len(said) == 9 and all(line.count("\n") == 0 for line in said)
    assert any(
        s.startswith("--set train.epochs=3: train.epochs is now train.num_train_epochs")
        for s in said
    )
    with pytest.warns(FutureWarning, match="train.epochs is now train.num_train_epochs"):
        load_recipe(old)


def test_a_key_under_its_old_and_new_name_is_refused(tmp_path: Path) -> None:
    from scd.errors import InputError

    both = _recipe(tmp_path, "train: {epochs: 2, num_train_epochs: 0}\n")  # 0: not silently lost
    with pytest.raises(InputError, match="train.epochs and its new name train.num_train_epochs"):
        load_recipe(both)
    seeds = _recipe(tmp_path, "eval: {seed: 7, bbq: {seed: 1}}\n")
    with pytest.raises(InputError, match="eval.seed and its new name eval.bbq.seed"):
        load_recipe(seeds)


def test_engine_keys_belong_to_their_backend() -> None:
    from scd.errors import InputError
    from scd.pipeline.recipe import recipe_from_dict

    base = {"model": "toy", "data": {"descriptors": "toy"}}
    with pytest.raises(InputError, match="eval.batch_size: an option of the hf backend"):
        recipe_from_dict({**base, "eval": {"backend": "vllm", "batch_size": 32}})
    with pytest.raises(InputError, match="eval.tensor_parallel_size: an option of the vllm"):
        recipe_from_dict({**base, "eval": {"tensor_parallel_size": 2}})
    with pytest.raises(InputError, match="eval.gpu_memory_utilization: expected 0 < f <= 1"):
        recipe_from_dict({**base, "eval": {"backend": "vllm", "gpu_memory_utilization": 1.5}})
    vllm = {"backend": "vllm", "tensor_parallel_size": 2, "max_model_len": 2048}
    options = recipe_from_dict({**base, "eval": vllm}).eval.to_engine_spec().engine_options()
    assert options["tensor_parallel_size"] == 2 and options["max_model_len"] == 2048
    older = {**vllm, "batch_size": None, "device": None, "base_url": None}  # every engine's key
    assert recipe_from_dict({**base, "eval": older}).eval.to_engine_spec() == engine_spec(**vllm)
    assert "batch_size" not in options  # unset: the engine's default


def test_training_reads_the_recipe_through_its_typed_spec(tmp_path: Path) -> None:
    """The stages of `scd train` get a TrainingSpec: the recipe's own sections, the bias
    check's keys from eval and capability, and no spec without an output_dir (one line)."""
    from scd.train.spec import TrainingSpec

    text = (
        "quantization: 4bit\neval: {system_prompt: Be fair., batch_size: 3, "
        "bias: {protocol: paper-chat, rule: mean}}\ncapability: {neutral_prompts: n.yaml}\n"
    )
    recipe = load_recipe(_recipe(tmp_path, text), ["arena.beta=0.25"])
    spec = TrainingSpec.of(recipe)
    assert (spec.model, spec.output_dir, spec.quantization) == ("m", Path("o"), "4bit")
    assert spec.train is recipe.train and spec.lora is recipe.lora and spec.data is recipe.data
    assert spec.arena.beta == 0.25 and spec.wandb is recipe.wandb
    check = spec.bias
    assert (check.protocol, check.rule, check.system_prompt) == ("paper-chat", "mean", "Be fair.")
    assert (check.batch_size, check.neutral_prompts) == (3, "n.yaml")
    unset = load_recipe(_recipe(tmp_path, ""), ["output_dir=null"])
    with pytest.raises(InputError, match=r"^recipe: output_dir: needed by scd train"):
        TrainingSpec.of(unset)
