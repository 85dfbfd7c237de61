"""scd -- Social Contact Debiasing: measure and reduce social bias in LLMs.

``scd.__version__`` is read from the installed package's metadata when first asked for (PEP 562),
not at ``import scd``: importing :mod:`importlib.metadata` and scanning ``sys.path`` is a tenth
of a second that ``scd --help`` does not need.
"""

from __future__ import annotations

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    if name != "__version__":
        raise AttributeError(f"module 'scd' has no attribute '{name}'")
    from importlib.metadata import PackageNotFoundError, version

    try:
        value = version("scd")
    except PackageNotFoundError:  # running from a source tree without installation
        value = "0.0.0+source"
    globals()["__version__"] = value  # cached: later reads skip this function
    return value
