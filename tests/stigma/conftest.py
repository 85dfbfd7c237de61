"""Stigma-probe fixtures: small prompt dirs and tiny models built offline once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="module", autouse=True)
def _no_reference_lexicon(tmp_path_factory: pytest.TempPathFactory):
    """An empty SCD_DATA_DIR for each module: the mlm probe's default lexicon is the packaged one
    whatever the machine caches (a test that wants the authors' words sets its own)."""
    old = os.environ.get("SCD_DATA_DIR")
    os.environ["SCD_DATA_DIR"] = str(tmp_path_factory.mktemp("empty-data-dir"))
    yield
    if old is None:
        os.environ.pop("SCD_DATA_DIR", None)
    else:
        os.environ["SCD_DATA_DIR"] = old


@pytest.fixture(scope="session")
def stigma_probe_prompts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`scd generate stigma --limit-conditions 5`: 5 + 5 conditions, 5 nouns/illnesses per list."""
    from scd.data_gen.stigma_probes import generate_stigma

    out = tmp_path_factory.mktemp("stigma") / "prompts5"
    generate_stigma(out, limit_conditions=5)
    return out


@pytest.fixture(scope="session")
def tiny_prompts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`--limit-conditions 1`: the smallest prompt dir (fast AQ-27 runs)."""
    from scd.data_gen.stigma_probes import generate_stigma

    out = tmp_path_factory.mktemp("stigma") / "prompts1"
    generate_stigma(out, limit_conditions=1)
    return out


@pytest.fixture(scope="session")
def toy_mlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from stigma_toy_models import build_toy_masked_lm

    out = tmp_path_factory.mktemp("stigma") / "mlm"
    build_toy_masked_lm(out, limit_conditions=5)
    return out


@pytest.fixture(scope="session")
def toy_classifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from stigma_toy_models import build_toy_classifier

    out = tmp_path_factory.mktemp("stigma") / "clf"
    build_toy_classifier(out, limit_conditions=5)
    return out


@pytest.fixture(scope="session")
def toy_causal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from stigma_toy_models import build_toy_causal_lm

    out = tmp_path_factory.mktemp("stigma") / "causal"
    build_toy_causal_lm(out)
    return out
