"""One way to register (docs/ARCHITECTURE.md): every registry is a scd.config.registry.Registry,
the packages that hold the things fill them when imported, and a registry read before that says
so instead of answering empty."""

from __future__ import annotations

import subprocess
import sys

import pytest

from scd.config.registry import Registry
from scd.errors import InputError


class Thing:
    name = "thing"


def test_a_registry_finds_by_name_and_names_the_known_ones() -> None:
    things: Registry[type] = Registry("widget")
    assert things.register(Thing) is Thing  # usable as a class decorator
    assert things.named("thing") is Thing
    with pytest.raises(InputError) as err:
        things.named("thnig")
    assert str(err.value) == "--widget thnig: expected thing"


def test_a_registry_read_before_anything_is_registered_says_so() -> None:
    with pytest.raises(RuntimeError, match="no widget is registered"):
        Registry("widget").named("thing")
    with pytest.raises(RuntimeError, match="no widget is registered"):
        Registry("widget").require()


def test_a_thing_without_a_name_is_refused() -> None:
    with pytest.raises(TypeError, match="needs a 'name'"):
        Registry("widget").register(object())


def _fresh(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_packages_that_hold_the_things_register_them() -> None:
    """config alone registers nothing (it names no module above it); importing the package
    that holds the things registers the built-in ones, and reading a recipe registers all."""
    registries = (
        "from scd.config.arms import ARMS, METHODS; from scd.config.engine import ENGINES; "
        "print(len(ENGINES), len(ARMS), len(METHODS))"
    )
    assert _fresh(registries) == "0 0 0"
    assert _fresh("import scd.eval.engines; " + registries) == "3 0 0"
    assert _fresh("import scd.train.arms; " + registries) == "0 8 3"
    engines, arms, methods = map(int, _fresh("import scd.pipeline.recipe; " + registries).split())
    assert engines >= 3 and arms >= 8 and methods >= 3
    text = _fresh(
        "from scd.config.engine import engine_spec\n"
        "try:\n    engine_spec('hf')\nexcept RuntimeError as err:\n    print(err)"
    )
    assert text.startswith("no backend is registered")
