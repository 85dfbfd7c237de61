"""Whether a Hub repository can be had, known in a second, before any work.

transformers and datasets find out only after their own retries (a misspelled id with no network
costs a minute and a screen of warnings); :func:`hub_problem` asks once: the local Hub cache, then
(online) the Hub's listing, with no download and no retry."""

from __future__ import annotations

from scd.errors import first_line

__all__ = ["hub_problem"]


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
    if constants.HF_HUB_OFFLINE:
        return ("not in the local Hub cache, and HF_HUB_OFFLINE is set (download it once "
                "online, or give a local path)") if filename else ""  # fmt: skip
    try:
        HfApi().repo_info(repo, repo_type=repo_type, timeout=10)
    except GatedRepoError:
        return "gated on the Hub: accept its terms there and set HF_TOKEN"
    except RepositoryNotFoundError:
        return f"no such {repo_type} on the Hub (a private one needs HF_TOKEN)"
    except Exception as err:  # noqa: BLE001 -- network errors of every kind
        return (f"the Hub cannot be reached ({first_line(err)}); offline, set HF_HUB_OFFLINE=1 "
                "to use a cached copy")  # fmt: skip
    return ""
