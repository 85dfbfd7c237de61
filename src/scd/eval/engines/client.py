"""A JSON client for a model server (OpenAI-compatible HTTP API): many requests in flight,
each retried with backoff on what passes (a timeout, a dropped connection, a malformed answer,
408/429/5xx, ``Retry-After`` honoured), answers returned in request order, every failure one
line.

Requests are greedy and have no side effects, so a retry is always safe. The API key lives only
in the client's ``Authorization`` header: no message, record or log this module writes holds a
request's headers.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Any

from scd.errors import InputError, cut_line, first_line
from scd.progress import tick

__all__ = ["RETRY_STATUS", "Malformed", "ServerClient", "ServerRefused"]

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
BACKOFF_S, BACKOFF_CAP_S, RETRY_AFTER_CAP_S = 0.25, 8.0, 60.0
CONNECT_TIMEOUT_S = 10.0
_FAIL: Any = object()  # a 404/405 fails (the default of ``missing``)


class Malformed(ValueError):
    """An answer that is not what the protocol says (retried like a transient fault)."""


class ServerRefused(InputError):
    """The server refused a request (a 4xx other than a refused key), or gave an answer that is
    not what was asked for and was not to be retried: one line, like every InputError."""


class _Transient(Exception):
    def __init__(self, reason: str, wait: float | None = None) -> None:
        super().__init__(reason)
        self.reason, self.wait = reason, wait


class _BadAnswer(_Transient):
    pass


def _retry_after(headers: Any) -> float | None:
    try:
        wait = float(headers.get("retry-after", ""))
    except ValueError:
        return None
    return min(max(wait, 0.0), RETRY_AFTER_CAP_S) if math.isfinite(wait) else None


def _server_message(response: Any) -> str:
    """The server's own reason: ``error.message`` (OpenAI, vLLM), ``error`` as a string
    (vLLM's 401), ``detail`` (FastAPI), else the start of the body."""
    try:
        body = response.json()
    except ValueError:  # e.g. a proxy's HTML page: its words, on one line
        return cut_line(" ".join(response.text.split())) or response.reason_phrase
    error = body.get("error", body.get("detail")) if isinstance(body, dict) else None
    if isinstance(error, dict):
        error = error.get("message")
    return first_line(ValueError(error or response.text), 300)


def _run(coro: Any) -> Any:
    """Run ``coro`` to the end from synchronous code, also where an event loop is running in
    this thread already (a notebook): then in a thread of its own. (asyncio is imported here and
    in the coroutines, not at the top: every parser build imports this module, #79.)"""
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


class ServerClient:
    """Requests to one server's API at ``base_url`` (e.g. ``http://127.0.0.1:8000/v1``); a
    path is relative to it, one starting with ``/`` to the server (``base_url`` without ``/v1``).

    Args:
        api_key: sent as ``Authorization: Bearer``; None: no header.
        key_hint: where the key comes from, for the line said when the server refuses it.
        timeout: seconds for one answer. retries: tries after the first. concurrency: requests
            in flight at once.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None,
        key_hint: str,
        timeout: float,
        retries: int,
        concurrency: int,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._key = api_key
        self.key_hint, self.timeout = key_hint, timeout
        self.retries, self.concurrency = retries, concurrency

    def _fail(self, detail: str, kind: type[InputError] = InputError) -> InputError:
        if self._key:  # a server's or proxy's message may quote the key it was sent
            detail = detail.replace(self._key, "<redacted>")
        return kind(detail, key="base_url", value=self.base_url)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        parse: Callable[[Any], Any] = lambda x: x,
        retry: bool = True,
        retry_malformed: bool = True,
        missing: Any = _FAIL,
    ) -> Any:
        """One request, parsed; ``retry``: retry transient faults, ``retry_malformed``: an
        answer ``parse`` refuses too; ``missing``: what a 404/405 (no such route) returns instead
        of failing."""
        retries = (retry, retry and retry_malformed)
        return _run(self._all(method, path, [(body, parse)], retries, missing))[0]

    def post_all(self, path: str, asks: Sequence[tuple[Any, Callable[[Any], Any]]]) -> list:
        """POST every ``(body, parse)`` (``concurrency`` at a time); each answer parsed, in order.

        ``parse`` turns the JSON answer into the result and raises :class:`Malformed` (or
        KeyError, ...) for one that is not what was asked: retried like a transient fault.

        Raises:
            InputError: a request that failed for good (after its retries, or a 4xx that no retry
                changes), one line; the other requests are cancelled.
        """
        return _run(self._all("POST", path, asks, (True, True), _FAIL))

    async def _all(
        self,
        method: str,
        path: str,
        asks: Sequence[tuple[Any, Callable]],
        retry: tuple[bool, bool],
        missing: Any,
    ) -> list:
        import asyncio

        import httpx

        gate = asyncio.Semaphore(self.concurrency)
        limits = httpx.Limits(max_connections=self.concurrency)
        timeout = httpx.Timeout(self.timeout, connect=min(self.timeout, CONNECT_TIMEOUT_S))
        async with httpx.AsyncClient(headers=self._headers, timeout=timeout, limits=limits) as http:
            finished = 0

            async def one(body: Any, parse: Callable) -> Any:
                nonlocal finished
                async with gate:
                    answer = await self._retried(http, method, path, body, parse, retry, missing)
                finished += 1
                tick(finished, len(asks))  # the progress line moves with each answer
                return answer

            tasks = [asyncio.ensure_future(one(b, p)) for b, p in asks]
            try:
                return await asyncio.gather(*tasks)
            except BaseException:  # the first failure goes on; the other requests are dropped
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise

    async def _retried(
        self,
        http: Any,
        method: str,
        path: str,
        body: Any,
        parse: Callable,
        retry: tuple[bool, bool],
        missing: Any,
    ) -> Any:
        import asyncio

        tries = 1 + (self.retries if retry[0] else 0)
        for attempt in range(tries):
            try:
                return await self._once(http, method, path, body, parse, missing)
            except _Transient as err:
                if isinstance(err, _BadAnswer) and not retry[1]:
                    raise self._fail(err.reason, ServerRefused) from None
                if attempt + 1 == tries:
                    again = (
                        (
                            f" after {tries} tries ({method} {path}); a re-run resumes where "
                            "this one stopped"
                        )
                        if tries > 1
                        else ""
                    )
                    raise self._fail(err.reason + again) from None
                backoff = min(BACKOFF_CAP_S, BACKOFF_S * 2**attempt) * random.uniform(0.75, 1.25)
                await asyncio.sleep(backoff if err.wait is None else err.wait)
        raise AssertionError("unreachable")

    async def _once(
        self, http: Any, method: str, path: str, body: Any, parse: Callable, missing: Any
    ) -> Any:
        import httpx

        # "/tokenize": a route of the server beside its OpenAI API (.../v1)
        root = self.base_url.removesuffix("/v1")
        url = root + path if path.startswith("/") else f"{self.base_url}/{path}"
        try:
            response = await http.request(method, url, json=body)
        except httpx.ConnectTimeout:
            raise _Transient(
                f"no connection to the server within {CONNECT_TIMEOUT_S:g} s"
            ) from None
        except httpx.TimeoutException:
            raise _Transient(
                f"no answer within {self.timeout:g} s (raise --request-timeout "
                "or lower --concurrency)"
            ) from None
        except httpx.RequestError as err:  # connection refused or dropped, a bad answer stream
            raise _Transient(f"no connection to the server ({first_line(err, 120)})") from None
        except httpx.InvalidURL as err:
            raise self._fail(f"not a usable URL ({first_line(err, 120)})") from None
        status = response.status_code
        if status in RETRY_STATUS:
            reason = f"the server answered {status}: {_server_message(response)}"
            raise _Transient(reason, _retry_after(response.headers))
        if status in (404, 405) and missing is not _FAIL:
            return missing
        if status in (401, 403):
            raise self._fail(
                f"the server refused the API key ({status}: "
                f"{_server_message(response)}; {self.key_hint})"
            )
        if status >= 400:
            raise self._fail(
                f"the server answered {status} to {method} {path}: {_server_message(response)}",
                ServerRefused,
            )
        try:
            answer = response.json()
        except ValueError:
            if "json" in response.headers.get("content-type", ""):  # cut short on the way
                raise _Transient("a malformed answer (JSON cut short)") from None
            answer = response.text  # e.g. vLLM's "Success: LoRA adapter ... added"
        try:
            return parse(answer)
        except (
            ValueError,
            KeyError,
            IndexError,
            TypeError,
            AttributeError,
        ) as err:  # Malformed too
            raise _BadAnswer(f"a malformed answer ({first_line(err, 120)})") from None
