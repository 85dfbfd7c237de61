"""The benchmarks, registered by name: ``scd eval <name>``, ``scd report <name>``, the recipe's
``eval.<name>`` section, ``scd run``'s evaluations, the report and W&B loop over
:data:`REGISTRY`. Adding a benchmark is a :class:`~scd.eval.benchmarks.base.Benchmark` in a
module of its own and one ``REGISTRY.register(benchmark)`` call, as engines, arms and methods
are registered (:mod:`scd.config.registry`; the built-in benchmarks: the lines below).
"""

from __future__ import annotations

from scd.config.registry import Registry
from scd.eval.benchmarks.base import Benchmark

__all__ = ["REGISTRY", "get", "recipe_sections"]

REGISTRY: Registry[Benchmark] = Registry("benchmark")


def get(name: str) -> Benchmark:
    """The benchmark called ``name``.

    Raises:
        InputError: no such benchmark (naming the known ones).
    """
    return REGISTRY.named(name)


def recipe_sections() -> dict[str, type]:
    """Each benchmark's options class by name: the sections of a recipe's ``eval``."""
    return {name: b.Options for name, b in REGISTRY.items()}


def _register_builtins() -> None:
    from scd.eval.benchmarks.bbq import BBQ
    from scd.eval.benchmarks.bias import Bias
    from scd.eval.benchmarks.crows_pairs import CrowsPairs
    from scd.eval.benchmarks.judgment import Judgment
    from scd.eval.benchmarks.stigma.aq27 import AQ27
    from scd.eval.benchmarks.stigma.mlm import MLM
    from scd.eval.benchmarks.stigma.sds import SDS
    from scd.eval.benchmarks.stigma.sentiment import Sentiment
    from scd.eval.benchmarks.winobias import WinoBias
    from scd.eval.benchmarks.winogender import Winogender

    builtins = (Bias(), BBQ(), SDS(), AQ27(), MLM(), Sentiment())
    beyond = (Judgment(), CrowsPairs(), WinoBias(), Winogender())  # beyond the templates
    builtins = (*builtins, *beyond)
    for benchmark in builtins:
        REGISTRY.register(benchmark)


_register_builtins()
