"""Watchers and resumes: how live a watched answer is, and how soon a dropped one goes on.

One daphne process with the real app (the in-memory channel layer, as one web process has) on
the relay benchmark's stand-in (a token of 5 characters every 20 ms). This process is every
client, so the clocks compared are one clock:
- watcher latency: an answer is asked for, then N watch streams of it are opened
  (`GET /api/generations/<id>/events`); once every watcher is live, for every token, the time
  each watcher got it minus the time the answer's own stream got it (the relay sent it), at 1,
  100 and 1,000 watchers; and over the same window the database queries the web process made
  (benchmarks/counted_queries.py) but the relay's own (RELAYS_OWN), per watcher per second;
- reconnect latency: an answer's own connection is closed mid-answer and its resume
  (`?from=<characters held>`) opened at once: the time from the close to the first new
  character, over several answers in turn.
"""

import argparse
import asyncio
import json
import logging
import os
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import httpx2

from common.sse import SSEParser

from . import report
from .counted_queries import QueryCounts
from .latency import spread
from .relay_client import Connection
from .relay_stack import (PASSWORD, USERNAME, app_env, base_url, daphne, fresh_database,
                          prepare_database, stand_in, started)
from .relay_upstream import raise_open_files_limit

logger = logging.getLogger(__name__)
QUESTION = json.dumps({"content": "Say something."}).encode()


@dataclass(frozen=True)
class Plan:
    watchers: tuple[int, ...] = (1, 100, 1000)
    answer_tokens: int = 1500  # 30 s: room to open 1,000 watch streams and still measure
    reconnects: int = 20
    interval_ms: float = 20.0
    first_token_ms: float = 30.0
    quick: bool = False


QUICK = Plan(watchers=(1, 20), answer_tokens=100, reconnects=3, quick=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 and 20 watchers, 3 reconnects")
    parser.add_argument("--watchers", help="watcher counts, comma-separated (default 1,100,1000)")
    parser.add_argument("--database-url", help="a PostgreSQL server for a database of the run's own "
                                               "(default: SQLite in a temporary directory)")
    report.add_publish_arguments(parser, "the BENCHMARKS.md section")


class Clients:
    """Signed-in HTTP clients of the app: one for the answers, one for all the watchers."""

    def __init__(self, url: str, connections: int):
        limits = httpx2.Limits(max_connections=connections + 10, max_keepalive_connections=connections + 10)
        self.url = url
        self.client = httpx2.AsyncClient(base_url=url, timeout=120.0, limits=limits)
        self.headers: dict[str, str] = {}

    async def sign_in(self) -> None:
        await self.client.get("/api/auth/session")
        self.headers = {"X-CSRFToken": self.client.cookies.get("csrftoken", "")}
        (await self.client.post("/api/auth/login", json={"username": USERNAME, "password": PASSWORD},
                                headers=self.headers)).raise_for_status()
        self.headers = {"X-CSRFToken": self.client.cookies.get("csrftoken", "")}

    async def conversation(self) -> int:
        answer = await self.client.post("/api/conversations", json={"title": "watch bench"}, headers=self.headers)
        return answer.raise_for_status().json()["id"]

    def ask(self, conversation_id: int):
        return self.client.stream("POST", f"/api/conversations/{conversation_id}/messages",
                                  content=QUESTION, headers={**self.headers, "Content-Type": "application/json"})

    def watch(self, generation_id: int, offset: int | None = None):
        query = "" if offset is None else f"?from={offset}"
        return self.client.stream("GET", f"/api/generations/{generation_id}/events{query}")


async def payloads(response: httpx2.Response):
    """Each event's payload as it arrives, with the time it did."""
    parser = SSEParser()
    async for chunk in response.aiter_bytes():
        now = time.perf_counter()
        for event in parser.feed(chunk):
            yield json.loads(event.data), now


class Reader:
    """One stream on a lean connection of its own (relay_client.py: httpx2, at 1,000 streams in
    this process, would measure itself): its deltas' end offsets and arrival times."""

    def __init__(self, clients: "Clients", on_start=lambda payload: None):
        host, port = clients.url.removeprefix("http://").split(":")
        self.connection, self.on_start = Connection(host, int(port)), on_start
        self.headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in clients.client.cookies.items()),
                        **clients.headers}
        self.parser, self.held, self.ends = SSEParser(), None, []

    async def read(self, method: str, path: str, body: bytes = b"") -> tuple[int, list[tuple[int, float]]]:
        """(characters before the first delta: a prefix's, [(end offset of each delta, its time)])."""
        await self.connection.request(method, path, body, self._take, self.headers)
        self.connection.close()
        return self.held or 0, self.ends

    def _take(self, body: bytes, arrival: float) -> None:
        for event in self.parser.feed(body):
            payload = json.loads(event.data)
            if "generation_id" in payload:  # start, prefix, or done
                self.held = len(payload.get("text", "")) if self.held is None else self.held
                self.on_start(payload)
            else:
                self.held = self.held or 0
                self.ends.append(((self.ends[-1][0] if self.ends else self.held) + len(payload["text"]), arrival))


def latencies(owner: list[tuple[int, float]], held: int, watched: list[tuple[int, float]],
              since: float) -> list[float]:
    """For each of the owner's deltas from `since` on that the watcher got live: its time there
    minus the owner's. The watcher's first delta is the relay's answer to its joining (all it
    lacked): not live."""
    held = max(held, watched[0][0]) if watched else held
    found, index = [], 0
    for end, at in owner:
        if end <= held or at < since:
            continue
        while index < len(watched) and watched[index][0] < end:
            index += 1
        if index == len(watched):
            break
        found.append(watched[index][1] - at)
    return found


# The relay's own queries: its writes (partial saves, heartbeats) and its one read of an early
# Stop, made after its first delta, which falls in the window of a single watcher.
RELAYS_OWN = ("chatapp.services.", "chatapp.selectors.stop_requested")


def per_watcher_second(made: dict[str, int], watchers: int, seconds: float) -> float | None:
    """The window's queries but the relay's own, per watcher per second."""
    watchers_made = sum(n for maker, n in made.items() if not maker.startswith(RELAYS_OWN))
    return watchers_made / watchers / seconds if seconds else None


async def watcher_latency(clients: Clients, count: int, queries: QueryCounts) -> dict:
    conversation = await clients.conversation()
    started_answer = asyncio.get_running_loop().create_future()
    owner = Reader(clients, lambda start: started_answer.done() or started_answer.set_result(start["generation_id"]))
    owning = asyncio.create_task(owner.read("POST", f"/api/conversations/{conversation}/messages", QUESTION))
    generation_id = await started_answer
    watching = [asyncio.create_task(Reader(clients).read("GET", f"/api/generations/{generation_id}/events"))
                for _ in range(count)]
    _, owned = await owning
    watched = await asyncio.gather(*watching)
    # Timed once every watcher is live: opening 1,000 streams is not delivering to them.
    all_live = max((ends[0][1] for _, ends in watched if ends), default=float("inf"))
    samples = [s for held, ends in watched for s in latencies(owned, held, ends, all_live)]
    # The window of the latency: every watcher live, to the owner's last delta (the final rows
    # are read after it).
    seconds, made = queries.between(all_live, owned[-1][1] if owned else all_live)
    return {"watchers": count, "live": sum(bool(ends) for _, ends in watched), "samples": len(samples),
            "latency_s": spread(samples), "window_s": round(seconds, 2), "queries": made,
            "queries_per_watcher_s": per_watcher_second(made, count, seconds)}


async def reconnect_latency(clients: Clients, rounds: int) -> dict:
    samples = []
    for _ in range(rounds):
        conversation = await clients.conversation()
        async with clients.ask(conversation) as response:
            held, generation_id = 0, None
            async for payload, _ in payloads(response):
                generation_id = payload.get("generation_id", generation_id)
                held += len(payload.get("text", "")) if "generation_id" not in payload else 0
                if held >= 50:
                    break
        dropped = time.perf_counter()  # the connection is closed as the block ends
        async with clients.watch(generation_id, held) as resumed:
            async for payload, now in payloads(resumed):
                if "generation_id" not in payload and payload.get("text"):
                    samples.append(now - dropped)
                    break
    return {"rounds": rounds, "latency_s": spread(samples)}


def section(results: dict) -> str:
    lines = ["## Watchers and resumes", "",
             f"`{results['command']}` ({results['started']}, {results['duration_s']} s, load average "
             f"{results['load_average']:.1f} on {os.cpu_count()} cores). One daphne process, a token every "
             "20 ms (50 tokens/s per watcher: 1,000 watchers are 50,000 events/s offered to one "
             "process); every client in the benchmark's own process. Targets: p50 <= 20 ms and "
             "p99 <= 100 ms at 100 watchers, reconnect p50 <= 300 ms; no database query per watcher while "
             "the live channel delivers (queries of the web process over the timed window, but the "
             "relay's own, per watcher per second).", "",
             "| watchers | live | tokens timed | latency p50 (ms) | p90 | p99 | queries per watcher per s |",
             "|---|---|---|---|---|---|---|"]
    for row in results["watchers"]:
        spread_ = row["latency_s"]
        lines.append(f"| {row['watchers']} | {row['live']} | {row['samples']} | {report.ms(spread_['p50'])} | "
                     f"{report.ms(spread_['p90'])} | {report.ms(spread_['p99'])} | "
                     f"{report.number(row['queries_per_watcher_s'], '.3f')} |")
    reconnect = results["reconnect"]["latency_s"]
    lines += ["", f"Reconnect (connection closed, resumed at once, to the first new character), "
                  f"{results['reconnect']['rounds']} answers: p50 {report.ms(reconnect['p50'])} ms, "
                  f"p90 {report.ms(reconnect['p90'])} ms, p99 {report.ms(reconnect['p99'])} ms."]
    return "\n".join(lines)


async def measure(plan: Plan, url: str, counts_file: Path) -> dict:
    clients = Clients(url, max(plan.watchers))
    await clients.sign_in()
    queries = QueryCounts(counts_file)
    queries.start()
    rows = []
    for count in plan.watchers:
        logger.info("%d watcher(s)", count)
        rows.append(await watcher_latency(clients, count, queries))
    queries.stop()
    logger.info("%d reconnects", plan.reconnects)
    reconnect = await reconnect_latency(clients, plan.reconnects)
    await clients.client.aclose()
    return {"watchers": rows, "reconnect": reconnect}


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    plan = QUICK if args.quick else Plan()
    if args.watchers:
        plan = replace(plan, watchers=tuple(int(n) for n in args.watchers.split(",")), quick=True)
    raise_open_files_limit()
    began = time.time()
    with tempfile.TemporaryDirectory(prefix="watch-bench-") as scratch, \
            fresh_database(args.database_url, Path(scratch), prefix="watch_bench") as database_url, \
            started(stand_in(plan.interval_ms, plan.first_token_ms)) as upstream:
        env = {**app_env(database_url, base_url(upstream), plan.answer_tokens),
               "CHAT_MAX_STREAMS_PER_USER": "10000"}
        prepare_database(env)
        counts_file = Path(scratch) / "queries.json"
        with started(daphne(env, counting_queries_in=counts_file)) as web:
            figures = asyncio.run(measure(plan, base_url(web), counts_file))
    results = {"benchmark": "watch", "command": args.command, "started": report.stamp(began),
               "plan": asdict(plan), **figures, "duration_s": round(time.time() - began, 1),
               "load_average": os.getloadavg()[0]}
    print(section(results))
    print(f"results: {report.write_results('watch', results, began)}")
    if report.publishing(args, plan.quick):
        print(f"section: {report.write_section('watch', section(results))}")
    return 0
