"""Which inference replica opens the next answer: the least loaded of those that lately answered.

`INFERENCE_URL` may list several upstreams, comma-separated; those serving the answer's model
(chatapp/upstream/models.py) are its replicas. Each web process counts the streams
it has open on each replica, and corrects that count from the replicas' /metrics, which also see
the other web processes' streams. The metrics are read in the background, at most once every
`INFERENCE_METRICS_INTERVAL_SECONDS` and only while answers are being started, never on a
request's path. A replica that refused or could not be reached goes to the back of the line for
`INFERENCE_AVOID_SECONDS`. With `INFERENCE_RESOLVE_REPLICAS`, each listed host name stands for
every address it resolves to (Docker's DNS answers a scaled service's name with all its
containers). With one replica and no resolving, nothing is polled and the request goes where it
always went.
"""

import asyncio
import contextlib
import itertools
import math
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import httpx2
from django.conf import settings

from common.metrics import metric_values

from . import models as upstream_models
from .http_client import client

# Sequences a replica is serving or holding, by the names its kind of server gives them: ours,
# vLLM's, llama.cpp's (the live view shows them apart, chatapp/upstream/replica_figures.py).
RUNNING_METRICS = ("inference_running_sequences", "vllm:num_requests_running", "llamacpp:requests_processing")
WAITING_METRICS = ("inference_waiting_sequences", "vllm:num_requests_waiting", "llamacpp:requests_deferred")
_LOAD_METRICS = {*RUNNING_METRICS, *WAITING_METRICS}
# A report older than this many intervals says more about the past than about now.
_STALE_INTERVALS = 3


@dataclass
class Replica:
    url: str
    num_open: int = 0  # this process's streams on it now, opening ones included
    num_reported: float | None = None  # sequences its /metrics counted at the last poll
    num_open_at_report: int = 0
    reported_at: float = -math.inf
    avoid_until: float = -math.inf

    def load(self, now: float) -> float:
        """The streams open here, plus those the replica reported beyond them (other processes')."""
        if self.num_reported is None or now - self.reported_at > _STALE_INTERVALS * _interval():
            return self.num_open
        return max(self.num_open, self.num_reported + self.num_open - self.num_open_at_report)

    def refused(self) -> None:
        self.avoid_until = time.monotonic() + settings.INFERENCE_AVOID_SECONDS

    @contextlib.contextmanager
    def opening(self):
        """Counts a stream from its request on; the caller hands it to `closed` once opened."""
        self.num_open += 1
        try:
            yield
        except BaseException:
            self.num_open -= 1
            raise

    def closed(self) -> None:
        self.num_open -= 1


_replicas: dict[str, Replica] = {}
_resolved: dict[str, list[str]] = {}  # listed URL -> the URLs of its addresses
_turn = itertools.count()  # equal loads take turns
_polled_at = -math.inf
_polling: asyncio.Task | None = None


def avoid(url: str) -> None:
    """A replica that could not be reached, or refused, for a question beside an answer (a
    prompt's count, a title) goes to the back of the line, as one that refused an answer does."""
    replica = _replicas.get(url)
    if replica is not None:
        replica.refused()


def forget() -> None:
    """Drops every replica's counts and avoidance (tests whose upstream's address an earlier
    test's upstream had: a refusal there must not send this test's requests elsewhere)."""
    _replicas.clear()


def _current(urls: list[str] | None = None) -> list[Replica]:
    """The replicas of `urls` (by default every upstream listed), each resolved address apart."""
    urls = upstream_models.listed() if urls is None else urls
    if settings.INFERENCE_RESOLVE_REPLICAS:
        urls = [address for url in urls for address in _resolved.get(url, [url])]
    return [_replicas.setdefault(url, Replica(url)) for url in dict.fromkeys(urls)]


def current_urls() -> list[str]:
    """Every replica's URL now: each resolved address of a listed name, when resolving."""
    return [replica.url for replica in _current()]


def first_answering_url(model: str) -> str:
    """The first replica of `model` in the list that has not lately refused (else the first one;
    "" for none): one that always answers the same questions, such as a prompt's token count."""
    replicas, now = _current(upstream_models.serving(model)), time.monotonic()
    answering = [replica for replica in replicas if replica.avoid_until <= now] or replicas
    return answering[0].url if answering else ""


def taking_turns(model: str) -> list[str]:
    """Every listed URL serving `model` (as listed: not resolved, a URL listed twice asked twice),
    each first in its turn, those lately avoided last: for a request that needs no choice by load
    (a title), off the event loop the polls run on."""
    urls, now = upstream_models.serving(model), time.monotonic()
    start = next(_turn) % len(urls) if urls else 0
    turned = urls[start:] + urls[:start]
    return sorted(turned, key=lambda url: _replicas.setdefault(url, Replica(url)).avoid_until > now)


def in_order(model: str) -> list[Replica]:
    """Every replica of `model`, the one to try first first: not lately refused, then least loaded."""
    replicas = _current(upstream_models.serving(model))
    if len(replicas) == 1 and not settings.INFERENCE_RESOLVE_REPLICAS:
        return replicas
    _poll_when_due()
    now, turn = time.monotonic(), next(_turn)
    position = {replica.url: index for index, replica in enumerate(replicas)}
    return sorted(replicas, key=lambda replica: (
        replica.avoid_until > now, replica.load(now), (position[replica.url] - turn) % len(replicas)))


def _interval() -> float:
    return settings.INFERENCE_METRICS_INTERVAL_SECONDS


def _poll_when_due() -> None:
    global _polling, _polled_at
    running = _polling is not None and not _polling.done() and not _polling.get_loop().is_closed()
    if running or time.monotonic() - _polled_at < _interval():
        return
    _polled_at = time.monotonic()
    _polling = asyncio.get_running_loop().create_task(poll())


async def poll() -> None:
    """Resolves the listed names (when asked to) and reads every replica's load once."""
    if settings.INFERENCE_RESOLVE_REPLICAS:
        for url in upstream_models.listed():
            with contextlib.suppress(OSError):
                _resolved[url] = await _addresses(url)
    await asyncio.gather(*(_read_metrics(client(), replica) for replica in _current()))


async def _addresses(url: str) -> list[str]:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    found = await asyncio.get_running_loop().getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    netlocs = [f"[{ip}]:{port}" if family == socket.AF_INET6 else f"{ip}:{port}"
               for family, _, _, _, (ip, *_) in found]
    return [urlunsplit(parts._replace(netloc=netloc)) for netloc in dict.fromkeys(netlocs)] or [url]


async def _read_metrics(client: httpx2.AsyncClient, replica: Replica) -> None:
    try:
        response = await client.get(f"{replica.url}/metrics", timeout=settings.INFERENCE_CONNECT_TIMEOUT_SECONDS)
    except httpx2.HTTPError:
        replica.num_reported = None
        replica.refused()
        return
    if response.status_code == 200:
        replica.num_reported, replica.num_open_at_report = load_in(response.text), replica.num_open
        replica.reported_at = time.monotonic()
        # Avoidance is left to run out: a replica that says it is busy still serves its metrics.


def load_in(exposition: str) -> float | None:
    """The sequences running and waiting in a Prometheus text exposition; None if it names none."""
    try:
        values = metric_values(exposition)
    except ValueError:  # not Prometheus' text format
        return None
    found = [values[name] for name in _LOAD_METRICS if name in values]
    return sum(found) if found else None
