"""The catalogue: which models each upstream serves, as its `GET /v1/models` says.

`INFERENCE_URL` lists the upstreams, any OpenAI-compatible server (ours, llama.cpp's, vLLM);
each serves one model or several, and the upstreams that serve one model are its replicas (the
relay picks among them by load, inference_replicas.py). Each entry keeps the whole of
what its upstream says of a model (vLLM adds `max_model_len`, for one), so that whoever needs
a figure reads it here.

The catalogue is read the first time it is needed, then again in the background once it is
older than `INFERENCE_MODELS_INTERVAL_SECONDS`, never on a request's path after the first. An
upstream that cannot be read keeps what it said last (being down is the replica choice's
business, not the catalogue's); one never read, or without the endpoint, is taken to serve the
default model (`CHAT_MODEL`), as every upstream was before models were discovered.
"""

import asyncio
import math
import time
from dataclasses import dataclass

import httpx2
from django.conf import settings

from ..errors import ApiError
from .http_client import client, sync_client

# A model asked for that no upstream lists is looked for again at once, at most this often: an
# upstream that was restarting may list nothing for a while (ours answers 503 while it loads,
# which keeps what it listed before, as an upstream that cannot be read does).
_RECHECK_SECONDS = 1.0


@dataclass(frozen=True)
class Listing:
    """What one upstream said of its models; `models` None when it never said (or cannot)."""

    models: tuple[dict, ...] | None = None
    read_at: float = -math.inf

    def serves(self, name: str) -> bool:
        if self.models is None:
            return name == settings.CHAT_MODEL
        return any(entry["id"] == name for entry in self.models)


_listings: dict[str, Listing] = {}  # upstream URL -> its last listing
_refreshing: asyncio.Task | None = None


def listed() -> list[str]:
    """The upstreams `INFERENCE_URL` names, in its order (one named twice is there twice)."""
    return [url.strip().rstrip("/") for url in settings.INFERENCE_URL.split(",") if url.strip()]


def serving(name: str) -> list[str]:
    """The upstreams that serve the model `name`, in `INFERENCE_URL`'s order."""
    return [url for url in listed() if _listings.get(url, Listing()).serves(name)]


def is_served(name: str) -> bool:
    return bool(serving(name))


def names() -> list[str]:
    """Every model served now, each once, in the order the upstreams list them."""
    found: dict[str, None] = {}
    for url in listed():
        listing = _listings.get(url, Listing())
        found.update(dict.fromkeys([settings.CHAT_MODEL] if listing.models is None
                                   else [entry["id"] for entry in listing.models]))
    return list(found)


def entry(name: str) -> dict | None:
    """What the first upstream that lists the model says of it (its `/v1/models` entry)."""
    for url in listed():
        for model in _listings.get(url, Listing()).models or ():
            if model["id"] == name:
                return model
    return None


async def fresh(name: str | None = None, *, waits: bool = False) -> None:
    """Brings the listings up to date enough for the model `name`: old ones are read again in
    the background, or before returning when the caller `waits` (a choice of model, not an
    answer's start).

    With one upstream, an answer for the default model never waits for its first read (an
    upstream not yet read serves it: one upstream costs nothing more than before models were
    discovered); otherwise the upstreams not yet read are read first. A model that no upstream
    lists is looked for again at once (if not within the last second), so that a model back
    after a restart is found.
    """
    global _refreshing
    now = time.monotonic()
    unread = [url for url in listed() if url not in _listings]
    is_old = bool(unread) or now - _oldest() >= settings.INFERENCE_MODELS_INTERVAL_SECONDS
    if unread and (waits or name != settings.CHAT_MODEL or len(listed()) > 1):
        await _read_all(unread)
    elif (waits and is_old) or (name is not None and not is_served(name) and now - _oldest() >= _RECHECK_SECONDS):
        await _read_all(listed())
    elif is_old:
        running = _refreshing is not None and not _refreshing.done() and not _refreshing.get_loop().is_closed()
        if not running:
            _refreshing = asyncio.get_running_loop().create_task(_read_all(listed()))


async def known(name: str) -> None:
    """A model the user picks must be served now: else 400 `unknown_model`."""
    await fresh(name, waits=True)
    if not is_served(name):
        raise ApiError(400, "unknown_model", f"no upstream serves a model named {name[:200]!r}")


async def still_served(name: str) -> None:
    """A conversation's own model, asked for an answer: else 503 `model_unavailable`."""
    await fresh(name)
    if not is_served(name):
        raise ApiError(503, "model_unavailable",
                       f"the model {name[:200]!r} is not served now; choose another model for this conversation")


def fresh_now() -> None:
    """`fresh` for a thread without an event loop (a Celery worker's task): reads what is old."""
    now = time.monotonic()
    old = [url for url in listed() if now - _listings.get(url, Listing()).read_at >= settings.INFERENCE_MODELS_INTERVAL_SECONDS]
    with sync_client(timeout=settings.INFERENCE_CONNECT_TIMEOUT_SECONDS) as threads_client:
        for url in old:
            try:
                response = threads_client.get(f"{url}/v1/models")
            except httpx2.HTTPError:
                response = None
            _note(url, response)


def forget() -> None:
    """Drops every listing (tests that change what an upstream serves)."""
    _listings.clear()


def _oldest() -> float:
    return min((_listings[url].read_at for url in listed() if url in _listings), default=-math.inf)


async def _read_all(urls: list[str]) -> None:
    timeout = settings.INFERENCE_CONNECT_TIMEOUT_SECONDS
    responses = await asyncio.gather(*(client().get(f"{url}/v1/models", timeout=timeout) for url in urls),
                                     return_exceptions=True)
    for url, response in zip(urls, responses):
        if isinstance(response, BaseException) and not isinstance(response, httpx2.HTTPError):
            raise response
        _note(url, None if isinstance(response, BaseException) else response)


def _note(url: str, response: httpx2.Response | None) -> None:
    """Records an upstream's answer; an answer that is no listing keeps the last one."""
    models = _models_in(response) if response is not None else None
    known = _listings.get(url, Listing())
    if models is None and response is not None and response.status_code == 404:
        known = Listing()  # a peer without the endpoint: the default model, as before discovery
    _listings[url] = Listing(known.models if models is None else models, time.monotonic())


def _models_in(response: httpx2.Response) -> tuple[dict, ...] | None:
    """The entries of an OpenAI model list, each with a string `id`; None if it is no such list."""
    if response.status_code != 200:
        return None
    try:
        data = response.json()["data"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(data, list):
        return None
    return tuple(model for model in data if isinstance(model, dict) and isinstance(model.get("id"), str))
