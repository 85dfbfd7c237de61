"""The Hugging Face Hub, asked before any work and written to after it.

transformers and datasets find out only after their own retries (a misspelled id with no network
costs a minute and a screen of warnings); :func:`hub_problem` asks once: the local Hub cache, then
(online) the Hub's listing, with no download and no retry. :func:`hub_token` is checked before
a run that will upload, :func:`upload` uploads a finished directory; the token is never shown."""

from __future__ import annotations

import os
from pathlib import Path

from scd.errors import InputError, first_line

__all__ = ["hub_problem", "hub_token", "require_hub_dataset", "upload"]


def hub_problem(repo: str, repo_type: str = "model", filename: str | None = "config.json") -> str:
    """Why ``repo`` cannot be had, in a few words for an error line; ``""`` when ``filename`` of
    it is in the local Hub cache or the Hub lists it.

    ``repo_type``: ``model`` or ``dataset``; ``filename`` None: nothing to look for in the Hub
    cache, and offline (``HF_HUB_OFFLINE``) nothing to say: datasets keep a cache of their own.
    """
    from huggingface_hub import HfApi, constants, try_to_load_from_cache
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    if filename and isinstance(try_to_load_from_cache(repo, filename, repo_type=repo_type), str):
        return ""
    datasets_offline = repo_type == "dataset" and os.environ.get(
        "HF_DATASETS_OFFLINE", ""
    ).upper() in ("1", "ON", "YES", "TRUE")
    if constants.HF_HUB_OFFLINE or datasets_offline:
        return (
            (
                "not in the local Hub cache, and HF_HUB_OFFLINE is set (download it once "
                "online, or give a local path)"
            )
            if filename
            else ""
        )
    try:
        HfApi().repo_info(repo, repo_type=repo_type, timeout=10)
    except GatedRepoError:
        return "gated on the Hub: accept its terms there and set HF_TOKEN"
    except RepositoryNotFoundError:
        return f"no such {repo_type} on the Hub (a private one needs HF_TOKEN)"
    except Exception as err:  # noqa: BLE001 -- network errors of every kind
        return (
            f"the Hub cannot be reached ({first_line(err)}); offline, set HF_HUB_OFFLINE=1 "
            "to use a cached copy"
        )
    return ""


def require_hub_dataset(name: str, key: str) -> None:
    """Refuse the Hub dataset ``name`` (given as ``key``) when :func:`hub_problem` says it
    cannot be had (offline: the datasets cache answers, nothing is refused).

    Raises:
        InputError: one line naming ``key``, ``name`` and why.
    """
    problem = hub_problem(name, repo_type="dataset", filename=None)
    if problem:
        raise InputError(problem, key=key, value=name)


def hub_token(key: str) -> str:
    """The Hub token of this environment (``HF_TOKEN`` or ``hf auth login``); never shown.

    Raises:
        InputError: there is none (naming ``key``, the option that asked for an upload).
    """
    from huggingface_hub import get_token

    token = get_token()
    if not token:
        raise InputError("no Hub token: set HF_TOKEN or run `hf auth login`", key=key)
    return token


def upload(
    directory: Path | str,
    repo: str,
    *,
    repo_type: str,
    key: str,
    message: str,
    private: bool | None = None,
    allow: list[str] | None = None,
) -> str:
    """Upload ``directory`` (only the files matching ``allow``, if given) to ``repo``, created
    if missing, with huggingface_hub; return the repository's URL.

    Raises:
        InputError: no token, or the Hub refused or could not be reached (one line naming
            ``key`` and ``repo``; never the token).
    """
    from huggingface_hub import HfApi

    api = HfApi(token=hub_token(key))
    try:
        url = api.create_repo(repo, repo_type=repo_type, private=private, exist_ok=True)
        api.upload_folder(
            repo_id=repo,
            folder_path=str(directory),
            repo_type=repo_type,
            commit_message=message,
            allow_patterns=allow,
        )
    except Exception as err:  # the Hub's HTTP, auth and validation errors  # noqa: BLE001
        raise InputError(
            f"cannot upload to the Hub: {first_line(err)}", key=key, value=repo
        ) from None
    return str(url)
