"""What the stack holds, sampled while a suite runs: memory and file descriptors per role,
PostgreSQL connections to its database, Redis clients; and whether any of it grew.

A role's figures include its descendants (nginx's workers, Celery's pool): what matters is
what the role holds, however it splits it into processes.
"""

import threading
import time
from dataclasses import dataclass, field
from statistics import mean
from urllib.parse import urlsplit

import psutil

from .stack_under_test import StackUnderTest


@dataclass
class Sample:
    at_s: float  # seconds since sampling began
    rss_bytes: dict[str, int] = field(default_factory=dict)  # by role
    fds: dict[str, int] = field(default_factory=dict)        # by role
    postgres_connections: int | None = None
    redis_clients: int | None = None

    def figures(self) -> dict[str, float]:
        """Every figure by one name, e.g. `rss_bytes.web`, for judging growth alike."""
        flat: dict[str, float] = {}
        for role, value in self.rss_bytes.items():
            flat[f"rss_bytes.{role}"] = value
        for role, value in self.fds.items():
            flat[f"fds.{role}"] = value
        if self.postgres_connections is not None:
            flat["postgres_connections"] = self.postgres_connections
        if self.redis_clients is not None:
            flat["redis_clients"] = self.redis_clients
        return flat


def _tree_totals(pid: int) -> tuple[int, int]:
    """RSS and open file descriptors of a process and its descendants."""
    rss = fds = 0
    try:
        root = psutil.Process(pid)
        family = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0, 0
    for process in family:
        try:
            rss += process.memory_info().rss
            fds += process.num_fds()
        except psutil.Error:
            continue  # a pool process that just ended
    return rss, fds


class ResourceSampler:
    """Samples every `interval_s` in a thread of its own, so a busy event loop cannot skew it."""

    def __init__(self, stack: StackUnderTest, interval_s: float = 5.0):
        self.stack, self.interval_s = stack, interval_s
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="resource-sampler", daemon=True)
        self._started, self._duration_s, self._delay_s = 0.0, 0.0, 0.0

    def __enter__(self) -> "ResourceSampler":
        return self

    def start(self, duration_s: float, delay_s: float = 0.0) -> None:
        """Samples from `delay_s` on until `duration_s` from now has passed (or the block ends);
        a sample's `at_s` counts from the first sample."""
        self._delay_s, self._duration_s = delay_s, duration_s
        self._thread.start()

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def _run(self) -> None:
        if self._stop.wait(self._delay_s):
            return
        self._started = time.monotonic()
        self._duration_s -= self._delay_s
        with _PostgresProbe(self.stack.database_url) as postgres, _RedisProbe(self.stack.config.redis_url) as redis:
            while not self._stop.is_set() and time.monotonic() - self._started <= self._duration_s:
                self.samples.append(self.take(postgres, redis))
                self._stop.wait(self.interval_s)

    def take(self, postgres: "_PostgresProbe", redis: "_RedisProbe") -> Sample:
        sample = Sample(at_s=time.monotonic() - self._started)
        for role, pid in self.stack.pids().items():
            sample.rss_bytes[role.value], sample.fds[role.value] = _tree_totals(pid)
        sample.postgres_connections = postgres.connections()
        sample.redis_clients = redis.clients()
        return sample


class _PostgresProbe:
    """Counts the connections to the stack's database, from the server's maintenance database
    (so that this probe's own connection is not among them). None on SQLite."""

    def __init__(self, database_url: str):
        parts = urlsplit(database_url)
        self.database = parts.path.lstrip("/")
        self.server_url = parts._replace(path="/postgres").geturl() if parts.scheme.startswith("postgres") else ""
        self.connection = None

    def __enter__(self):
        if self.server_url:
            import psycopg

            self.connection = psycopg.connect(self.server_url, autocommit=True)
        return self

    def __exit__(self, *exc) -> None:
        if self.connection is not None:
            self.connection.close()

    def connections(self) -> int | None:
        if self.connection is None:
            return None
        row = self.connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (self.database,)).fetchone()
        return row[0]


class _RedisProbe:
    """Clients connected to the stack's Redis index, less this probe: INFO's connected_clients
    counts the whole server, which other programs may share. None without Redis."""

    def __init__(self, redis_url: str):
        self.redis_url = redis_url
        self.client = None

    def __enter__(self):
        if self.redis_url:
            import redis

            self.client = redis.Redis.from_url(self.redis_url)
        return self

    def __exit__(self, *exc) -> None:
        if self.client is not None:
            self.client.close()

    def clients(self) -> int | None:
        if self.client is None:
            return None
        index = self.client.connection_pool.connection_kwargs.get("db", 0)
        return sum(1 for c in self.client.client_list() if int(c.get("db", -1)) == index) - 1


# --- growth ---
@dataclass(frozen=True)
class Tolerance:
    """Allowed growth of the last window's mean over the first's: the larger of the two."""

    relative: float
    absolute: float

    def allows(self, first: float, last: float) -> bool:
        return last - first <= max(self.relative * first, self.absolute)


# Memory: allocators keep freed pages and caches warm up, so a little rise is no leak; a leak of
# even a few KB per answer would pass 10% over thousands of answers. Descriptors and
# connections are counts of things held per open stream; the mean over a window still moves by
# a few as streams come and go, so a handful is noise and a steady climb is not.
TOLERANCES = {
    "rss_bytes": Tolerance(relative=0.10, absolute=0),
    "fds": Tolerance(relative=0.05, absolute=5),
    "postgres_connections": Tolerance(relative=0.0, absolute=5),
    "redis_clients": Tolerance(relative=0.0, absolute=5),
}


@dataclass
class Growth:
    name: str
    first: float
    last: float
    tolerance: Tolerance

    @property
    def is_within(self) -> bool:
        return self.tolerance.allows(self.first, self.last)


def growth(samples: list[Sample], window_s: float) -> list[Growth]:
    """Each figure's mean over the first `window_s` of sampling against the last `window_s`."""
    if not samples:
        return []
    end = samples[-1].at_s
    first = [s.figures() for s in samples if s.at_s <= window_s]
    last = [s.figures() for s in samples if s.at_s >= end - window_s]
    results = []
    for name in sorted(set().union(*first) & set().union(*last)):
        kind = name.split(".", 1)[0]
        results.append(Growth(name, mean(f[name] for f in first if name in f),
                              mean(f[name] for f in last if name in f), TOLERANCES[kind]))
    return results

