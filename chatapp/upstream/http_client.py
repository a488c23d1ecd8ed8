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


def _new_client() -> httpx2.AsyncClient:
    return httpx2.AsyncClient(
        timeout=httpx2.Timeout(settings.INFERENCE_READ_TIMEOUT_SECONDS,
                               connect=settings.INFERENCE_CONNECT_TIMEOUT_SECONDS),
        limits=httpx2.Limits(max_connections=settings.INFERENCE_MAX_CONNECTIONS,
                             max_keepalive_connections=100),
    )


client = per_loop(_new_client)  # its connections belong to the loop they were opened on
