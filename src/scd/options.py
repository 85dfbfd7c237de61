"""The closed sets of values and the defaults that several modules share: one definition each.

The command line (``scd.cli``), the recipe schema (``scd.train.recipe``) and the library
functions read them from here, so that an allowed value or a default cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["BACKENDS", "DENOMINATORS", "DTYPES", "EVAL_BATCH_SIZE", "MODES", "SEED", "one_of"]

BACKENDS = ("hf", "vllm")  # inference engines, see scd.eval.engines
DTYPES = ("auto", "float32", "bfloat16", "float16")  # auto: bfloat16 on CUDA, float32 on CPU
MODES = ("choice", "generate")  # a bias prompt: its most probable option, or greedy text parsed
DENOMINATORS = ("all", "parsed")  # bias %: over all prompts (the paper) or the parsed ones
EVAL_BATCH_SIZE = 32  # hf engine and the stigma pipelines: prompts per forward pass
SEED = 42  # the paper's seed: training, the train/eval split and the SFT sampling


def one_of(values: Sequence[str]) -> str:
    """``a, b or c``: the allowed values, for an error message."""
    return ", ".join(values[:-1]) + " or " + values[-1] if len(values) > 1 else values[0]
