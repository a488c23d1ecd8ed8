"""The HTTP client every request to the inference replicas goes through, one per event loop.

Its timeouts are fit for a slow first token and its pool is sized for many concurrent streams.
httpx2 is pydantic's maintained fork of httpx, with the same API: httpx 0.28's pool scanned
every connection for every request, a sixth of daphne's time at 50 streams (BENCHMARKS.md).
The streaming client (inference_client.py) and the replicas' metrics poll
(inference_replicas.py) share it.
"""

import httpx2
from django.conf import settings

from ..runtime.per_loop import per_loop

# A proxy the environment names (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY; NO_PROXY excepted) carries
# the requests to upstreams elsewhere, never those to this machine's own loopback, which no proxy
# reaches (Go's net/http makes the same exception): else `make run` in a shell behind a proxy
# sent every question for its own inference service to the proxy.
DIRECT_TO_LOOPBACK = {"all://127.0.0.1": None, "all://localhost": None, "all://[::1]": None}


def sync_client(**options) -> httpx2.Client:
    """A client for the upstreams outside an event loop (a Celery task, the catalogue's refresh)."""
    return httpx2.Client(mounts=DIRECT_TO_LOOPBACK, **options)


def async_client(**options) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(mounts=DIRECT_TO_LOOPBACK, **options)


def _new_client() -> httpx2.AsyncClient:
    return async_client(
        timeout=httpx2.Timeout(settings.INFERENCE_READ_TIMEOUT_SECONDS,
                               connect=settings.INFERENCE_CONNECT_TIMEOUT_SECONDS),
        limits=httpx2.Limits(max_connections=settings.INFERENCE_MAX_CONNECTIONS,
                             max_keepalive_connections=100),
    )


client = per_loop(_new_client)  # its connections belong to the loop they were opened on

# What a kept-alive connection that its peer closed before answering raises: the close, or a reset.
_DROPPED_UNANSWERED = (httpx2.RemoteProtocolError, httpx2.ReadError, httpx2.WriteError)


async def send(request: httpx2.Request, **options) -> httpx2.Response:
    """`client().send`, and again once when the connection was closed before any answer came.

    The pool keeps a connection for 5 s, and a peer closes one idle that long (uvicorn's
    default, which vLLM's server and our stand-ins keep, and llama.cpp's server): a request sent
    just then meets the close, and was refused as if the upstream were unreachable. Nothing was
    answered, so nothing was started: the request goes again, on a fresh connection (the pool
    drops the closed one), and a peer really unreachable fails that one too.
    """
    try:
        return await client().send(request, **options)
    except _DROPPED_UNANSWERED:
        return await client().send(request, **options)
