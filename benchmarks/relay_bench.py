"""Relay overhead: TTFT and inter-event gap through daphne vs. directly from the upstream.

A fast stand-in upstream (benchmarks/relay_upstream.py: N chunks of a few characters, a fixed
interval apart) runs in its own process, daphne with the real app in another, and this process
is the load generator (benchmarks/relay_client.py, one keep-alive connection per stream).
At each level all streams start together, each a full answer; a round goes straight to the
stand-in ("direct") and the next through daphne ("through": POST
/api/conversations/<id>/messages, one fresh conversation per stream), alternating, so both
see the same machine. TTFT is request sent -> first content chunk (direct) or first `delta`
event (through); the gap is the time between two consecutive ones of a stream. The added
latency is through minus direct, at the same percentile.

A stream is an error when the status is not 200, the stream breaks, the end ([DONE] or the
`done` event) is missing, or it does not carry exactly the N chunks in order.
"""

import argparse
import asyncio
import contextlib
import ctypes
import json
import logging
import os
import platform
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from . import report
from .latency import RequestRecord, spread
from .machine_load import DISTURBED_CORES, ForeignLoad, _process_ticks
from .relay_client import Connection
from .relay_upstream import chunk_text, raise_open_files_limit
from .server_process import ChildProcess, free_port

logger = logging.getLogger(__name__)

SECTION = "relay"
TARGET_ADDED_MS = 2.0
TARGET_STREAMS = 500
DIRECT, THROUGH = "direct", "through"
PATH_NAMES = {DIRECT: "direct (stand-in upstream)", THROUGH: "through daphne"}
USERNAME, PASSWORD = "relay-bench", "relay-bench-password-7193"
PROMPT = "Say something short."


@dataclass(frozen=True)
class Plan:
    levels: tuple[int, ...] = (1, 50, 500)
    # Rounds per level, each path: enough TTFT samples for a p99 at the low levels.
    rounds: tuple[int, ...] = (20, 4, 2)
    chunks: int = 50
    interval_ms: float = 20.0
    warm_up_streams: int = 8
    quick: bool = False

    def rounds_at(self, level: int) -> int:
        return dict(zip(self.levels, self.rounds))[level]

    @property
    def conversations(self) -> int:
        return self.warm_up_streams + sum(l * r for l, r in zip(self.levels, self.rounds))


DATABASE_NOTES = {
    "sqlite": "SQLite in a temporary directory with the app's own options: WAL with "
              "synchronous=NORMAL, IMMEDIATE transactions whose writers queue on one Python lock "
              "per process (chatapp/sqlite_queue)",
    "postgresql": "a database of its own on the PostgreSQL server given by --database-url",
}

QUICK = Plan(levels=(1, 10), rounds=(3, 1), chunks=10, warm_up_streams=2, quick=True)


@dataclass
class PathRun:
    """One path at one level, over all its rounds."""

    path: str
    level: int
    records: list[RequestRecord] = field(default_factory=list)
    wall_s: float = 0.0
    cpu_s: dict[str, float] = field(default_factory=lambda: {"daphne": 0.0, "upstream": 0.0,
                                                               "client": 0.0})
    other_core_s: float = 0.0
    other_known: bool = True
    upstream_connections: int = 0
    daphne_peak_rss: int | None = None
    conversations: list[int] = field(default_factory=list)  # through: one per record
    relay_ttft_ms: list[float] = field(default_factory=list)  # the relay's own, from the rows

    @property
    def ok(self) -> list[RequestRecord]:
        return [r for r in self.records if r.ok]

    def summary(self) -> dict:
        ok = self.ok
        deltas = sum(len(r.arrivals) for r in self.records)
        errors: dict[str, int] = {}
        for record in self.records:
            if not record.ok:
                kind = record.error or "unfinished"
                errors[kind] = errors.get(kind, 0) + 1
        wall = self.wall_s or None
        return {
            "path": self.path, "level": self.level, "streams": len(self.records),
            "ok": len(ok), "errors": len(self.records) - len(ok),
            "error_kinds": dict(sorted(errors.items(), key=lambda kv: -kv[1])[:5]),
            "ttft_s": spread([r.ttft for r in ok if r.ttft is not None]),
            "gap_s": spread([gap for r in ok for gap in r.itls]),
            "e2e_s": spread([r.e2e for r in ok if r.e2e is not None]),
            "wall_s": self.wall_s,
            "events_per_s": deltas / wall if wall else None,
            "peak_flowing": _peak_flowing(self.records),
            "cpu_cores": {name: (s / wall if wall else None) for name, s in self.cpu_s.items()},
            "other_cpu_cores": (self.other_core_s / wall if wall and self.other_known else None),
            "upstream_connections_per_stream": (self.upstream_connections / len(self.records)
                                                if self.records else None),
            "daphne_peak_rss_bytes": self.daphne_peak_rss,
            "daphne_cpu_us_per_event": (self.cpu_s["daphne"] / deltas * 1e6
                                        if deltas and self.path == THROUGH else None),
            "relay_ttft_s": spread([ms / 1000 for ms in self.relay_ttft_ms]),
        }


def _peak_flowing(records: list[RequestRecord]) -> int:
    """The most streams between their first chunk and their end at one time: how many answers
    were really flowing together, whatever the number of open requests."""
    edges = []
    for record in records:
        if record.arrivals:
            edges += [(record.arrivals[0], 1), (record.finished_at or record.arrivals[-1], -1)]
    peak = flowing = 0
    for _, step in sorted(edges, key=lambda edge: (edge[0], edge[1])):
        flowing += step
        peak = max(peak, flowing)
    return peak


# --- options ---
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run of under a minute: levels 1,10, answers of 10 chunks")
    parser.add_argument("--levels", help="comma-separated concurrent streams (default 1,50,500)")
    parser.add_argument("--rounds", help="comma-separated rounds per level, one per --levels "
                                         "entry (default 20,4,2)")
    parser.add_argument("--chunks", type=int, help="content chunks per answer (default 50)")
    parser.add_argument("--interval-ms", type=float,
                        help="the stand-in's time between two chunks of an answer (default 20)")
    parser.add_argument("--database-url",
                        help="a PostgreSQL server (postgres://user@host:port/db): the benchmark "
                             "creates a database of its own there and drops it after (default: "
                             "SQLite in a temporary directory)")
    parser.add_argument("--strict", action="store_true",
                        help="exit with 1 when a target fails (otherwise verdicts are only shown)")
    report.add_publish_arguments(parser, "the BENCHMARKS.md section")


def plan_from(args: argparse.Namespace) -> Plan:
    plan = QUICK if args.quick else Plan()
    chosen = report.levels_with_counts(args.levels, args.rounds, "rounds",
                                       dict(zip(plan.levels, plan.rounds)),
                                       lambda level: max(1, 100 // level))
    if chosen:
        plan = replace(plan, levels=chosen[0], rounds=chosen[1])
    if args.chunks:
        plan = replace(plan, chunks=args.chunks)
    if args.interval_ms is not None:
        plan = replace(plan, interval_ms=args.interval_ms)
    if min(plan.levels) < 1 or min(plan.rounds) < 1 or plan.chunks < 2:
        raise SystemExit("levels and rounds must be at least 1, --chunks at least 2")
    return plan


# --- the processes ---
def _child_setup() -> None:
    """In the child before exec: killed with the benchmark (SIGKILL: daphne holding streams
    may sit out a SIGTERM), and room for a connection per stream."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    raise_open_files_limit()


class Child(ChildProcess):
    """daphne or the stand-in: killed with SIGKILL with the benchmark, room for many sockets."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], ready_url: str):
        super().__init__(name, command, env, ready_url, setup=_child_setup, stop_timeout_s=20.0)

    def trouble(self) -> dict[str, int]:
        """The log's error lines (exception names and messages, not the traceback frames), with
        how often each came; the access log's 5xx answers count as one kind."""
        found: dict[str, int] = {}
        for line in self.log_text().splitlines():
            access = re.match(r'^\S+ - - \[[^]]+\] "[^"]*" (\d{3}) ', line)
            if access:
                if access.group(1).startswith("5"):
                    key = f"HTTP {access.group(1)} answered"
                    found[key] = found.get(key, 0) + 1
                continue
            if re.match(r"^[\w.]+(Error|Exception|Warning)\b|.* (ERROR|WARNING|CRITICAL) ", line):
                key = re.sub(r"^\d{4}-\d\d-\d\d [\d:,]+ ", "", line)[:200]
                found[key] = found.get(key, 0) + 1
        return dict(sorted(found.items(), key=lambda kv: -kv[1]))


@contextlib.contextmanager
def fresh_database(server_url: str | None, scratch: Path, prefix: str = "relay_bench"):
    """A database URL of the run's own: a SQLite file in `scratch`, or a database created on
    the PostgreSQL server `server_url` and dropped afterwards."""
    if not server_url:
        yield f"sqlite:///{scratch / 'db.sqlite3'}"
        return
    import psycopg

    name = f"{prefix}_{os.getpid()}"
    with psycopg.connect(server_url, autocommit=True) as server:
        server.execute(f'CREATE DATABASE "{name}"')
        try:
            yield urlsplit(server_url)._replace(path=f"/{name}").geturl()
        finally:
            server.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def django_env(database_url: str, upstream_url: str, plan: Plan) -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "chatapp.settings",
        "DJANGO_SECRET_KEY": "relay-benchmark-only-not-a-secret",
        "DJANGO_DEBUG": "0",
        "DJANGO_LOG_LEVEL": "WARNING",
        "DATABASE_URL": database_url,
        "REDIS_URL": "",  # the in-memory channel layer: one daphne process, nothing else
        "INFERENCE_URL": upstream_url,
        "CHAT_MAX_STREAMS_PER_USER": "1000",
        "CHAT_MAX_TOKENS": str(plan.chunks),  # the stand-in answers max_tokens chunks
        "CHAT_CONTEXT_TOKENS": str(plan.chunks + 2048),
    }


_SETUP_SCRIPT = """
import json, sys
import django
django.setup()
from django.contrib.auth import get_user_model
from chatapp.models import Conversation
user = get_user_model().objects.create_user(sys.argv[1], password=sys.argv[2])
Conversation.objects.bulk_create(
    [Conversation(owner=user, title=f"relay bench {i}") for i in range(int(sys.argv[3]))])
print(json.dumps(list(Conversation.objects.filter(owner=user).order_by("pk")
                      .values_list("pk", flat=True))))
"""


def prepare_database(env: dict[str, str], conversations: int) -> list[int]:
    """Migrates the fresh database; one user, `conversations` empty conversations."""
    python = sys.executable
    subprocess.run([python, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=report.REPO_ROOT,
                   env=env, check=True, capture_output=True, text=True)
    made = subprocess.run([python, "-c", _SETUP_SCRIPT, USERNAME, PASSWORD, str(conversations)],
                          cwd=report.REPO_ROOT, env=env, check=True, capture_output=True,
                          text=True)
    return json.loads(made.stdout.strip().splitlines()[-1])


# --- one stream ---
def _parser():
    """The app's own SSE parser: it keeps the event names (imported late: importing chatapp
    loads its Celery app, which `python -m benchmarks --help` need not)."""
    from chatapp.sse import SSEParser

    return SSEParser()


def _expected_text(chunks: int) -> str:
    return "".join(chunk_text(i) for i in range(chunks))


def _check(record: RequestRecord, texts: list[str], chunks: int, end: str) -> None:
    if record.error is not None:
        return
    if record.finished_at is None:
        record.error = f"no {end}"
    elif not 0 < len(record.arrivals) <= chunks:  # a relay that falls behind merges chunks
        record.error = f"{len(record.arrivals)} events, expected 1 to {chunks}"
    elif "".join(texts) != _expected_text(chunks):
        record.error = "the text differs from the upstream's"


async def direct_stream(connection: Connection, chunks: int, record: RequestRecord,
                        go: asyncio.Event) -> None:
    body = json.dumps({"model": "stand-in", "messages": [{"role": "user", "content": PROMPT}],
                       "stream": True, "max_tokens": chunks,
                       "stream_options": {"include_usage": True}}).encode()
    texts: list[str] = []
    parser = _parser()

    def on_body(data: bytes, now: float) -> None:
        for event in parser.feed(data):
            if event.data == "[DONE]":
                record.finished_at = now
                continue
            for choice in json.loads(event.data).get("choices") or []:
                text = (choice.get("delta") or {}).get("content")
                if text:
                    record.arrivals.append(now)
                    texts.append(text)
                if choice.get("finish_reason"):
                    record.finish_reason = choice["finish_reason"]

    await go.wait()
    record.sent_at = time.perf_counter()
    try:
        status = await connection.request("POST", "/v1/chat/completions", body, on_body)
        if status != 200:
            record.error = f"HTTP {status}"
    except Exception as error:  # counted, not raised: the run goes on
        record.error = f"{type(error).__name__}: {error}"
    _check(record, texts, chunks, "[DONE]")


async def through_stream(connection: Connection, conversation: int, headers: dict[str, str],
                         chunks: int, record: RequestRecord, go: asyncio.Event) -> None:
    body = json.dumps({"content": PROMPT}).encode()
    texts: list[str] = []
    parser = _parser()

    def on_body(data: bytes, now: float) -> None:
        for event in parser.feed(data):
            if event.event == "delta":
                record.arrivals.append(now)
                texts.append(json.loads(event.data)["text"])
            elif event.event == "done":
                record.finished_at = now
                record.finish_reason = json.loads(event.data).get("finish_reason")
            elif event.event == "error":
                record.error = f"error event: {event.data[:120]}"

    await go.wait()
    record.sent_at = time.perf_counter()
    try:
        status = await connection.request(
            "POST", f"/api/conversations/{conversation}/messages", body, on_body, headers)
        if status != 200:
            record.error = f"HTTP {status}"
    except Exception as error:
        record.error = f"{type(error).__name__}: {error}"
    _check(record, texts, chunks, "done event")


# --- rounds and levels ---
class Bench:
    def __init__(self, plan: Plan, daphne: Child, upstream: Child, daphne_url: str,
                 upstream_url: str, conversations: list[int]):
        self.plan, self.daphne, self.upstream = plan, daphne, upstream
        self.daphne_url, self.upstream_url = daphne_url, upstream_url
        self.conversations = iter(conversations)
        self.control = httpx.AsyncClient(timeout=httpx.Timeout(60.0))  # sign-in, counters
        # The streams' own connections, one per concurrent stream and path (relay_client.py).
        self.connections: dict[str, list[Connection]] = {DIRECT: [], THROUGH: []}
        self.headers: dict[str, str] = {}

    async def aclose(self) -> None:
        await self.control.aclose()
        for connection in self.connections[DIRECT] + self.connections[THROUGH]:
            connection.close()

    async def login(self) -> None:
        await self.control.get(f"{self.daphne_url}/api/auth/session")
        response = await self.control.post(
            f"{self.daphne_url}/api/auth/login", json={"username": USERNAME, "password": PASSWORD},
            headers={"X-CSRFToken": self.control.cookies.get("csrftoken", "")})
        response.raise_for_status()
        self.headers = {
            "X-CSRFToken": self.control.cookies.get("csrftoken", ""),
            "Cookie": "; ".join(f"{name}={value}" for name, value in self.control.cookies.items()),
        }

    async def open_connections(self, count: int) -> None:
        """Each path holds `count` open keep-alive connections before a level: TTFT leaves out
        the TCP handshake, and no SYN overflows daphne's listen backlog (Twisted's 50)
        mid-measurement. Opened 50 at a time for the same reason."""
        for path, url in ((DIRECT, self.upstream_url), (THROUGH, self.daphne_url)):
            host, port = url.removeprefix("http://").split(":")
            connections = self.connections[path]
            while len(connections) < count:
                connections.append(Connection(host, int(port)))
            closed = [c for c in connections[:count] if not c.is_open]
            for start in range(0, len(closed), 50):
                answers = await asyncio.gather(*(c.open() for c in closed[start:start + 50]),
                                               return_exceptions=True)
                failed = [a for a in answers if isinstance(a, Exception)]
                if failed:
                    logger.warning("opening connections to %s: %d of %d failed (%r)", url,
                                   len(failed), len(answers), failed[0])
            held = sum(1 for c in connections[:count] if c.is_open)
            logger.info("  %d of %d connections open to %s", held, count, url)

    async def round(self, path: str, count: int, run: PathRun | None) -> list[RequestRecord]:
        records = [RequestRecord(i, self.plan.chunks, 0, sent_at=0.0) for i in range(count)]
        go = asyncio.Event()
        if path == DIRECT:
            streams = [direct_stream(connection, self.plan.chunks, r, go)
                       for connection, r in zip(self.connections[DIRECT], records)]
        else:
            ids = [next(self.conversations) for _ in records]
            if run is not None:
                run.conversations.extend(ids)
            streams = [through_stream(connection, conversation, self.headers, self.plan.chunks,
                                      r, go)
                       for connection, r, conversation in zip(self.connections[THROUGH],
                                                               records, ids)]
        tasks = [asyncio.create_task(stream) for stream in streams]
        await asyncio.sleep(0)  # every stream is now waiting for the start
        pids = {"daphne": self.daphne.pid, "upstream": self.upstream.pid, "client": os.getpid()}
        stats_before = await self._upstream_stats()
        ticks_before = {name: _process_ticks(pid) for name, pid in pids.items()}
        with ForeignLoad([self.daphne.pid, self.upstream.pid]) as load:
            started = time.perf_counter()
            go.set()
            await asyncio.gather(*tasks)
            wall = time.perf_counter() - started
        ticks_after = {name: _process_ticks(pid) for name, pid in pids.items()}
        stats_after = await self._upstream_stats()
        if run is not None:
            run.records.extend(records)
            run.wall_s += wall
            hz = os.sysconf("SC_CLK_TCK")
            for name in pids:
                run.cpu_s[name] += (ticks_after[name] - ticks_before[name]) / hz
            if load.cores is None:
                run.other_known = False
            else:
                run.other_core_s += load.cores * wall
            if stats_before and stats_after:
                run.upstream_connections += stats_after["connections"] - stats_before["connections"]
        return records

    async def _upstream_stats(self) -> dict | None:
        try:
            return (await self.control.get(f"{self.upstream_url}/stats")).json()
        except (httpx.HTTPError, ValueError):
            return None

    async def warm_up(self) -> None:
        count = self.plan.warm_up_streams
        await self.open_connections(count)
        for path in (DIRECT, THROUGH):
            records = await self.round(path, count, None)
            bad = [r.error for r in records if not r.ok]
            if bad:
                raise RuntimeError(f"warm-up {path}: {len(bad)} of {count} streams failed, "
                                   f"first: {bad[0]}")

    async def level(self, level: int) -> tuple[PathRun, PathRun]:
        rounds = self.plan.rounds_at(level)
        logger.info("level %d: %d round(s) per path", level, rounds)
        await self.open_connections(level)
        runs = {DIRECT: PathRun(DIRECT, level), THROUGH: PathRun(THROUGH, level)}
        for number in range(1, rounds + 1):
            for path in (DIRECT, THROUGH):  # alternating: both see the same machine
                records = await self.round(path, level, runs[path])
                ok = [r for r in records if r.ok]
                gaps = spread([g for r in ok for g in r.itls])
                ttfts = spread([r.ttft for r in ok])
                logger.info("  %-7s round %d/%d: %d/%d ok, TTFT p50 %s ms, gap p50 %s ms",
                            path, number, rounds, len(ok), level, report.ms(ttfts["p50"]),
                            report.ms(gaps["p50"]))
                await asyncio.sleep(0.2)  # the last round's tail (rows, sockets) settles
        runs[THROUGH].daphne_peak_rss = self.daphne.peak_rss_bytes()
        return runs[DIRECT], runs[THROUGH]


async def measure(bench: Bench) -> list[PathRun]:
    runs: list[PathRun] = []
    try:
        await bench.login()
        await bench.warm_up()
        for level in bench.plan.levels:
            runs.extend(await bench.level(level))
    finally:
        await bench.aclose()
    return runs


_RELAY_TTFTS_SCRIPT = """
import json
import django
django.setup()
from chatapp.models import Generation
print(json.dumps(list(Generation.objects.values_list("conversation_id", "ttft_ms"))))
"""


def read_relay_ttfts(env: dict[str, str], runs: list[PathRun]) -> None:
    """The relay's own TTFT of each relayed stream (the view's start to the first delta
    written, chatapp/relay.py), from its audit row: what the client's TTFT adds to it was
    spent before the view (middleware, session, user, the conversation) and on the wire."""
    read = subprocess.run([sys.executable, "-c", _RELAY_TTFTS_SCRIPT], cwd=report.REPO_ROOT,
                          env=env, capture_output=True, text=True)
    if read.returncode != 0:
        logger.warning("could not read the relay's own TTFTs: %s", read.stderr[-500:])
        return
    found = dict(json.loads(read.stdout.strip().splitlines()[-1]))
    for run in runs:
        run.relay_ttft_ms = [found[c] for c in run.conversations if found.get(c) is not None]


# --- the verdicts ---
def _p(run: PathRun | None, figure: str, q: str = "p50") -> float | None:
    return None if run is None else run.summary()[figure][q]


def added_ms(direct: PathRun | None, through: PathRun | None, figure: str,
             q: str = "p50") -> float | None:
    a, b = _p(direct, figure, q), _p(through, figure, q)
    return None if a is None or b is None else (b - a) * 1000


def _find(runs: list[PathRun], path: str, level: int) -> PathRun | None:
    return next((r for r in runs if r.path == path and r.level == level), None)


def evaluate_targets(runs: list[PathRun], plan: Plan) -> list[dict]:
    targets = []
    for level in plan.levels:
        direct, through = _find(runs, DIRECT, level), _find(runs, THROUGH, level)
        for figure, label in (("ttft_s", "TTFT"), ("gap_s", "gap")):
            added = added_ms(direct, through, figure)
            name = f"@{level}: added p50 {label} < {TARGET_ADDED_MS:g} ms"
            if added is None:
                targets.append({"name": name, "measured": None, "threshold": TARGET_ADDED_MS,
                                "passed": None, "detail": "no completed stream to compare"})
                continue
            targets.append({
                "name": name, "measured": added, "threshold": TARGET_ADDED_MS,
                "passed": added < TARGET_ADDED_MS,
                "detail": f"{added:+.2f} ms (through {report.ms(_p(through, figure))} ms, direct "
                          f"{report.ms(_p(direct, figure))} ms)"})
    through = _find(runs, THROUGH, TARGET_STREAMS)
    name = f"{TARGET_STREAMS} concurrent streams through one daphne process, 0 errors"
    if through is None:
        targets.append({"name": name, "measured": None, "threshold": 0, "passed": None,
                        "detail": f"level {TARGET_STREAMS} not run"})
    else:
        s = through.summary()
        kinds = "; ".join(f"{n} x {kind}" for kind, n in s["error_kinds"].items())
        targets.append({"name": name, "measured": s["errors"], "threshold": 0,
                        "passed": s["errors"] == 0 and s["ok"] == s["streams"],
                        "detail": f"{s['ok']}/{s['streams']} streams complete over "
                                  f"{plan.rounds_at(TARGET_STREAMS)} round(s), {s['errors']} "
                                  f"errors" + (f": {kinds}" if kinds else "")})
    return targets


def _verdict(target: dict) -> str:
    return {True: "PASS", False: "FAIL", None: "N/A "}[target["passed"]]


# --- the table ---
COLUMNS = ["streams", "path", "ok/streams", "TTFT ms p50/p90/p99", "gap ms p50/p90/p99",
           "events/s", "peak flowing", "CPU cores daphne/upstream/client", "other CPU"]
ADDED_COLUMNS = ["streams", "added TTFT ms p50 (p90, p99)", "added gap ms p50 (p90, p99)",
                 "relay's own TTFT ms p50/p90/p99", "daphne CPU µs per event",
                 "upstream conns per stream", "daphne peak RSS"]


def _triple(spread_s: dict) -> str:
    return "/".join(report.ms(spread_s.get(k)) for k in ("p50", "p90", "p99"))


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2f}"


def rows(runs: list[PathRun]) -> list[list[str]]:
    out = []
    for run in sorted(runs, key=lambda r: (r.level, r.path != DIRECT)):
        s = run.summary()
        cpu = s["cpu_cores"]
        other = s["other_cpu_cores"]
        out.append([
            str(run.level), PATH_NAMES[run.path], f"{s['ok']}/{s['streams']}",
            _triple(s["ttft_s"]), _triple(s["gap_s"]),
            f"{s['events_per_s']:.0f}" if s["events_per_s"] else "-",
            str(s["peak_flowing"]),
            "/".join(report.cores(cpu[k]) for k in ("daphne", "upstream", "client")),
            report.cores(other) + (" !" if (other or 0.0) > DISTURBED_CORES else ""),
        ])
    return out


def added_rows(runs: list[PathRun], plan: Plan) -> list[list[str]]:
    out = []
    for level in plan.levels:
        direct, through = _find(runs, DIRECT, level), _find(runs, THROUGH, level)
        cells = [str(level)]
        for figure in ("ttft_s", "gap_s"):
            p50, p90, p99 = (added_ms(direct, through, figure, q) for q in ("p50", "p90", "p99"))
            cells.append(f"{_signed(p50)} ({_signed(p90)}, {_signed(p99)})")
        s = through.summary() if through else {}
        per_stream = s.get("upstream_connections_per_stream")
        peak = s.get("daphne_peak_rss_bytes")
        per_event = s.get("daphne_cpu_us_per_event")
        cells += [_triple(s.get("relay_ttft_s", {})),
                  "-" if per_event is None else f"{per_event:.0f}",
                  "-" if per_stream is None else f"{per_stream:.2f}",
                  "-" if not peak else f"{peak / 1e6:.0f} MB"]
        out.append(cells)
    return out


def caveat_lines(runs: list[PathRun]) -> list[str]:
    flagged = [f"{PATH_NAMES[r.path]} @{r.level} ({s['other_cpu_cores']:.2f} cores)"
               for r in runs for s in [r.summary()]
               if (s["other_cpu_cores"] or 0.0) > DISTURBED_CORES]
    if not flagged:
        return []
    return [f"WARNING: other processes used more than {DISTURBED_CORES} cores during: "
            + ", ".join(flagged) + ". Those figures are not trustworthy; rerun on a quiet machine."]


def trouble_lines(results: dict) -> list[str]:
    trouble = results.get("daphne_log_trouble") or {}
    if not trouble:
        return []
    return ([f"daphne's log: {sum(trouble.values())} error line(s), most frequent first:"]
            + [f"  {count} x {line}" for line, count in list(trouble.items())[:8]])


def print_results(results: dict, runs: list[PathRun], plan: Plan, targets: list[dict]) -> None:
    print(f"\n=== relay benchmark: {plan.chunks} chunks {plan.interval_ms:g} ms apart per "
          "stream ===")
    for line in report.text_table(COLUMNS, rows(runs)):
        print(line)
    print("\nadded by the relay (through daphne minus direct):")
    for line in report.text_table(ADDED_COLUMNS, added_rows(runs, plan)):
        print(line)
    print()
    for target in targets:
        print(f"{_verdict(target)} {target['name']}: {target['detail']}")
    for line in caveat_lines(runs) + trouble_lines(results):
        print(line)
    print(f"\ncommand: {results['command']}")


# --- files ---
def render_section(results: dict, runs: list[PathRun], plan: Plan, targets: list[dict]) -> str:
    m = results["machine"]
    lines = ["## Relay (daphne)", ""]
    if plan.quick:
        lines += ["**Quick smoke run: few streams and short answers, not representative. Run the "
                  "full command below for real figures.**", ""]
    rounds = ", ".join(f"{r} round{'s' if r > 1 else ''} of {l}" for l, r in
                       zip(plan.levels, plan.rounds))
    lines += [
        f"Command: `{results['command']}` (started {results['started']}, "
        f"{results['duration_s'] / 60:.1f} min, commit {m['commit']}).",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gb']:.0f} GB RAM; Python "
        f"{m['python']}, Django {m['django']}, daphne {m['daphne']}, Twisted {m['twisted']}, "
        f"httpx2 {m['httpx2']} (daphne's upstream client); load average at start "
        f"{m['load_average']}. **The load generator (one Python process), the stand-in upstream "
        f"and daphne share these {m['cores']} "
        "cores**, so the figures at the high levels include CPU contention between the three, "
        "not only the relay's own cost.",
        "",
        f"Workload: every stream is a full answer of {plan.chunks} content chunks of a few "
        f"characters, {plan.interval_ms:g} ms apart on a fixed schedule from the stand-in "
        "upstream (benchmarks/relay_upstream.py, plain asyncio, one process). At each level "
        f"all streams start together; {rounds} streams, each path, the paths alternating "
        "round by round. *Direct*: POST /v1/chat/completions on the stand-in; *through*: POST "
        "/api/conversations/<id>/messages on one daphne process running the app "
        "(`chatapp.asgi:application`, a signed-in user, one fresh conversation per stream, "
        "`CHAT_MAX_STREAMS_PER_USER=1000`, in-memory channel layer, `DJANGO_LOG_LEVEL=WARNING`, "
        f"{DATABASE_NOTES[results.get('database', 'sqlite')]}; the views' database work runs "
        "on the app's database threads, 8 by default, each keeping its connection: "
        "chatapp/database_threads). "
        "TTFT: request sent to first content chunk (direct) "
        "or first `delta` event (through); gap: between two consecutive ones of a stream. "
        "The load generator is a lean asyncio client (benchmarks/relay_client.py: one "
        "keep-alive connection per stream, each network read timed once; httpx, whose pool "
        "and per-chunk cost made the 500-stream baseline measure httpx itself, signs in only), "
        "and opens every connection before a level, so no TCP handshake is timed. A stream is "
        "an error unless it is 200, ends properly and carries "
        f"exactly the {plan.chunks} chunks in order. CPU: cores' worth of work of each process "
        "over the rounds' wall time; other CPU: processes outside the benchmark (flagged ! "
        f"above {DISTURBED_CORES}). Events/s: content chunks received per second of wall time; "
        "peak flowing: the most streams between their first chunk and their end at one time "
        "(all requests are open together, but an answer flows only once the relay has started "
        "it). "
        "The relay's own TTFT is the one it writes in its audit row (`ttft_ms`: the view's "
        "start to the first `delta` written), so the client's TTFT minus it is the time spent "
        "before the view (daphne, middleware, session and user) and on the wire; "
        "daphne CPU per event is daphne's CPU time over the content chunks it relayed, request "
        "handling included; upstream connections per stream counts the TCP connections the "
        "stand-in accepted from daphne (1.00: none is reused; a finished answer leaves its "
        "connection in the pool for the next).",
        "",
    ]
    lines += report.markdown_table(COLUMNS, rows(runs))
    lines += ["", "Added by the relay (through minus direct, same percentile):", ""]
    lines += report.markdown_table(ADDED_COLUMNS, added_rows(runs, plan))
    lines += ["", "Targets:", ""]
    lines += [f"- **{_verdict(t).strip()}** {t['name']}: {t['detail']}" for t in targets]
    caveats = caveat_lines(runs)
    if caveats:
        lines += [""] + [f"**{line}**" for line in caveats]
    trouble = trouble_lines(results)
    if trouble:
        lines += ["", trouble[0], ""] + [f"- `{line.strip()}`" for line in trouble[1:]]
    return "\n".join(lines)


def machine_notes() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "?"

    return {
        "cpu": report._cpu_model(), "cores": os.cpu_count(), "memory_gb": report._memory_gb(),
        "python": platform.python_version(), "django": installed("django"),
        "daphne": installed("daphne"), "twisted": installed("twisted"),
        "httpx2": installed("httpx2"),
        "load_average": ", ".join(f"{x:.2f}" for x in os.getloadavg()),
        "open_files_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        "commit": report._commit(),
    }


def to_json(results: dict, runs: list[PathRun], targets: list[dict]) -> dict:
    return {**results, "runs": [dict(run.summary(), records=[{
        "ttft_ms": None if r.ttft is None else round(r.ttft * 1000, 3),
        "e2e_ms": None if r.e2e is None else round(r.e2e * 1000, 1),
        "chunks": len(r.arrivals), "error": r.error if not r.ok else None,
    } for r in run.records]) for run in runs], "targets": targets}


def write_json(data: dict, started: float) -> Path:
    report.RESULTS_DIR.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(started))
    path = report.RESULTS_DIR / f"relay-{stamp}.json"
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


# --- the benchmark ---
def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    plan = plan_from(args)
    publish = report.publishing(args, plan.quick)
    logger.info("command: %s", args.command)
    raise_open_files_limit()
    started = time.time()
    machine = machine_notes()

    with tempfile.TemporaryDirectory(prefix="relay-bench-") as scratch, \
            fresh_database(args.database_url, Path(scratch)) as database_url:
        upstream_port, daphne_port = free_port(), free_port()
        upstream_url = f"http://127.0.0.1:{upstream_port}"
        daphne_url = f"http://127.0.0.1:{daphne_port}"
        env = django_env(database_url, upstream_url, plan)
        logger.info("preparing the database: %d conversations", plan.conversations)
        conversations = prepare_database(env, plan.conversations)
        upstream = Child("upstream", [sys.executable, "-m", "benchmarks.relay_upstream",
                                      "--port", str(upstream_port),
                                      "--interval-ms", str(plan.interval_ms),
                                      "--default-chunks", str(plan.chunks)],
                         dict(os.environ), f"{upstream_url}/health")
        daphne = Child("daphne", [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p",
                                  str(daphne_port), "chatapp.asgi:application"],
                       env, f"{daphne_url}/healthz")
        try:
            upstream.start()
            daphne.start()
            logger.info("stand-in upstream pid %d, daphne pid %d", upstream.pid, daphne.pid)
            runs = asyncio.run(measure(Bench(plan, daphne, upstream, daphne_url, upstream_url,
                                             conversations)))
            daphne.stop()  # every final write is in
            read_relay_ttfts(env, runs)
            daphne_trouble = daphne.trouble()
        except BaseException:
            for child in (daphne, upstream):
                if child.process is not None:
                    logger.error("%s log tail:\n%s", child.name, child.log_tail(150))
            raise
        finally:
            daphne.close()
            upstream.close()

    targets = evaluate_targets(runs, plan)
    results = {
        "benchmark": "relay", "command": args.command, "started": report.stamp(started),
        "duration_s": round(time.time() - started, 1), "plan": asdict(plan), "machine": machine,
        "daphne_log_trouble": daphne_trouble,
        "database": "postgresql" if args.database_url else "sqlite",
    }
    print_results(results, runs, plan, targets)
    json_path = write_json(to_json(results, runs, targets), started)
    print(f"results: {json_path}")
    if publish:
        print(f"section: {report.write_section(SECTION, render_section(results, runs, plan, targets))}")
    failed = [t for t in targets if t["passed"] is False]
    return 1 if failed and args.strict else 0
