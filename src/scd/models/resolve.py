"""What a ``model`` argument names, and the local directory transformers should load.

Every command that takes a model (``scd eval``, ``train``, ``run``, ``merge``) accepts:

- a local model directory (``config.json`` + weights) -- used as its absolute path, so that an
  adapter records a base that resolves from any working directory;
- a local ``.gguf`` file -- converted once into a cached plain directory (:mod:`scd.models.gguf`);
- a Hub GGUF file ``owner/repo/file.gguf`` -- downloaded with ``huggingface_hub``, then converted;
- a Hub id ``owner/name`` -- passed on unchanged (transformers downloads and caches it), once it
  is known to be there: in the local Hub cache, or listed on the Hub (:mod:`scd.hub`).

A spec that looks local and does not exist (``./m``, ``/m``, ``~/m``, a path whose first part is
an existing directory such as ``outputs/toy-modle``) fails at once with "no such directory",
rather than being sent to the Hub as an id.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

from scd.errors import InputError, first_line
from scd.hub import hub_problem
from scd.io import looks_local

__all__ = [
    "check_model_available",
    "check_model_spec",
    "is_gguf",
    "model_fingerprint",
    "model_name",
    "resolve_model",
]

_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")  # owner/name
_CONVERTED = re.compile(r"(.+)-[0-9a-f]{16}")  # gguf/<file stem>-<sha256[:16]> (scd.models.gguf)


def is_gguf(spec: str) -> bool:
    """Whether ``spec`` names a GGUF file (by its extension)."""
    return spec.lower().endswith(".gguf")


def _looks_local(spec: str) -> bool:
    if not is_gguf(spec):
        return looks_local(spec)
    # a Hub GGUF file is owner/repo/file.gguf: two slashes, and owner/repo no local path
    return spec.count("/") != 2 or looks_local(spec.rsplit("/", 1)[0])


def check_model_spec(spec: str, key: str = "--model") -> str:
    """Classify ``spec`` without loading anything: ``dir``, ``toy``, ``gguf``, ``hub_gguf`` or
    ``hub`` (``owner/name``: a bare name is refused at once rather than tried on the Hub).

    Raises:
        InputError: a local-looking path that does not exist, a file that is not a GGUF file, or
            something that is neither a path nor a Hub id.
    """
    path = Path(spec).expanduser()
    if path.is_dir():
        return "dir"
    if spec == "toy":
        return "toy"
    if path.is_file():
        if is_gguf(spec):
            return "gguf"
        raise InputError(
            f"{key} {spec}: a file, but not a .gguf file (expected a model "
            "directory, a .gguf file or a Hub id)"
        )
    if _looks_local(spec):
        kind = "file" if is_gguf(spec) else "directory"
        raise InputError(f"{key} {spec}: no such {kind}")
    if is_gguf(spec):  # owner/repo/file.gguf: any other shape looked local
        return "hub_gguf"
    if _HUB_ID.fullmatch(spec):
        return "hub"
    raise InputError(f"{key} {spec}: neither an existing path nor a Hub id (owner/name)")


def check_model_available(spec: str, key: str = "--model") -> str:
    """:func:`check_model_spec`, and for a Hub model :func:`~scd.hub.hub_problem`: everything that
    can be known of ``spec`` before any work, without downloading or converting it."""
    kind = check_model_spec(spec, key)
    if kind == "hub":
        problem = hub_problem(spec)
    elif kind == "hub_gguf":
        repo, filename = spec.rsplit("/", 1)
        problem = hub_problem(repo, filename=filename)
    else:
        problem = ""
    if problem:
        raise InputError(f"{key} {spec}: {problem}")
    return kind


def resolve_model(
    spec: str,
    key: str = "--model",
    say: Callable[[str], None] = print,
    toy_words: Sequence[str] = (),
) -> str:
    """The name transformers should load for ``spec``: an absolute directory or a Hub id.

    GGUF files are converted on first use (see :func:`scd.models.gguf.convert_gguf`); ``toy``
    is built once, with ``toy_words`` as tokens of their own where given (see
    :func:`scd.models.toy.build_toy_model`).

    Raises:
        InputError: see :func:`check_model_spec` and :func:`scd.models.gguf.inspect_gguf`.
    """
    kind = check_model_available(spec, key)
    if kind == "toy":  # the planted-bias model, built once (as scd run's default toy_model)
        from scd.models.toy import ensure_toy_model

        axes, cache = ("religion", "nationality"), Path("outputs/cache")
        return str(ensure_toy_model(axes, 0, cache, say, words=toy_words))
    if kind == "dir":
        return str(Path(spec).expanduser().resolve())
    if kind == "hub":
        return spec
    from scd.models.gguf import convert_gguf

    if kind == "hub_gguf":
        from huggingface_hub import hf_hub_download

        repo, filename = spec.rsplit("/", 1)
        try:
            spec = hf_hub_download(repo, filename)
        except Exception as err:  # network, auth, missing file  # noqa: BLE001
            first = first_line(err)
            raise InputError(
                f"{key} {spec}: cannot download {filename} from {repo} ({first})"
            ) from None
    return str(convert_gguf(spec, say=say))


def model_fingerprint(model: str) -> str:
    """A short content fingerprint of a local model directory (its ``config.json`` and the names
    and sizes of its files: hashing many GB of weights would cost more than it protects), or the
    Hub id itself."""
    import hashlib

    path = Path(model)
    if not path.is_dir():
        return model
    digest = hashlib.sha256()
    config = path / "config.json"
    if config.is_file():
        digest.update(config.read_bytes())
    for f in sorted(path.iterdir()):
        if f.suffix in (".safetensors", ".bin", ".json", ".model") and f.is_file():
            digest.update(f"{f.name}:{f.stat().st_size}\n".encode())
    return f"{path.name}-{digest.hexdigest()[:16]}"


def model_name(model: str) -> str:
    """How a table names ``model`` (a ``model`` argument, or the name :func:`resolve_model` gave
    it): a GGUF file by its file name, whether given as a local file or as the directory it was
    converted into (the file its ``manifest.json`` names, else the cache directory's name:
    ``gguf/<file stem>-<sha256[:16]>``, :mod:`scd.models.gguf`); anything else as given (a Hub
    id, a Hub GGUF ``owner/repo/file.gguf``, a model directory)."""
    import json

    if is_gguf(model):
        return Path(model).name if _looks_local(model) else model
    path = Path(model).expanduser()
    try:
        info = json.loads((path / "manifest.json").read_text())
    except (OSError, ValueError):
        info = None
    if isinstance(info, dict) and info.get("kind") == "gguf_conversion" and info.get("source"):
        return Path(str(info["source"])).name
    found = _CONVERTED.fullmatch(path.name)
    if found and path.parent.name == "gguf":
        return f"{found.group(1)}.gguf"
    return model
