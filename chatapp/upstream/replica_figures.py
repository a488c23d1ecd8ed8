"""Each inference replica's figures for the admins' live view, as its Prometheus /metrics says.

The live view shows each replica's running and waiting sequences and its KV cache use, read
when the view asks (chatapp/upstream/inference_replicas.py reads only the load, in the background, to
choose a replica). The replicas are the ones the relay chooses from. A replica that does not
answer is shown as such, not left out: an admin wants to see a replica that is down.
"""

import asyncio
from dataclasses import asdict, dataclass

import httpx2

from common.metrics import metric_values

from .http_client import async_client
from .inference_replicas import RUNNING_METRICS, WAITING_METRICS, current_urls

# Each figure's gauge as our inference service (inference/metrics.py), vLLM and llama.cpp's
# server name it (running and waiting: chatapp/upstream/inference_replicas.py); the first one a replica
# exports is read, summed over its labels (vLLM labels each sample with its model).
CACHE_USAGE = ("inference_kv_cache_usage_ratio", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
               "llamacpp:kv_cache_usage_ratio")
# A replica slower than this to say its figures is shown as unreachable: the view must not wait
# (a deadline for the whole read, which a peer dripping bytes cannot stretch).
SCRAPE_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class ReplicaLoad:
    url: str
    reachable: bool
    running: float | None = None  # None: the replica does not export the figure (vLLM names its own)
    waiting: float | None = None
    cache_usage: float | None = None  # share of the KV cache in use, 0 to 1
    error: str = ""

    def as_json(self) -> dict:
        return asdict(self)


def parse_load(url: str, metrics_text: str) -> ReplicaLoad:
    """The figures of one replica from its /metrics text (Prometheus' text format)."""
    values = metric_values(metrics_text)

    def first(names: tuple[str, ...]) -> float | None:
        return next((values[name] for name in names if name in values), None)

    return ReplicaLoad(url, True, first(RUNNING_METRICS), first(WAITING_METRICS), first(CACHE_USAGE))


async def replica_loads() -> list[ReplicaLoad]:
    """Every replica's load, read at once; one that fails says why."""
    async with async_client(timeout=SCRAPE_TIMEOUT_S) as client:
        return list(await asyncio.gather(*(_load(client, url) for url in current_urls())))


async def _load(client: httpx2.AsyncClient, url: str) -> ReplicaLoad:
    try:
        async with asyncio.timeout(SCRAPE_TIMEOUT_S):
            response = await client.get(f"{url}/metrics")
        response.raise_for_status()
        return parse_load(url, response.text)
    # ValueError: text that is not Prometheus'
    except (httpx2.HTTPError, TimeoutError, ValueError) as error:
        return ReplicaLoad(url, False, error=f"{type(error).__name__}: {error}"[:200])
