"""The relay benchmark's load: rounds of streams started together, straight to the stand-in
("direct") or through daphne ("through": POST /api/conversations/<id>/messages, a fresh
conversation per stream), with the CPU each process spent meanwhile.

Every stream has a keep-alive connection of its own (relay_client.py), opened before the
round, so no TCP handshake is timed. CPU comes from /proc/<pid>/stat.
"""

import asyncio
import json
import os
import time

import httpx2

from common.sse import SSEParser

from .machine_load import ForeignLoad, process_ticks
from .relay_client import Connection
from .relay_stack import PASSWORD, USERNAME
from .relay_stream import Round, Stream, take_openai_event, take_relay_event

DIRECT, THROUGH = "direct", "through"
PROMPT = json.dumps({"content": "Say something."}).encode()


def _direct_body(tokens: int) -> bytes:
    return json.dumps({"model": "stand-in", "stream": True, "max_tokens": tokens,
                       "messages": [{"role": "user", "content": "Say something."}]}).encode()


class Target:
    """Where a round's streams go: the stand-in itself, or the app behind `base_url`."""

    def __init__(self, path: str, base_url: str):
        self.path, self.base_url = path, base_url
        host, port = base_url.removeprefix("http://").split(":")
        self.host, self.port = host, int(port)
        self.connections: list[Connection] = []
        self.headers: dict[str, str] = {}
        self.control = httpx2.AsyncClient(base_url=base_url, timeout=60.0)

    async def sign_in(self) -> None:
        await self.control.get("/api/auth/session")
        cookies = self.control.cookies
        response = await self.control.post("/api/auth/login", json={
            "username": USERNAME, "password": PASSWORD},
            headers={"X-CSRFToken": cookies.get("csrftoken", "")})
        response.raise_for_status()
        self.headers = {"X-CSRFToken": cookies.get("csrftoken", ""),
                        "Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items())}

    async def conversations(self, count: int) -> list[int]:
        """`count` fresh conversations, made through the API 20 at a time."""
        made: list[int] = []
        while len(made) < count:
            answers = await asyncio.gather(*(
                self.control.post("/api/conversations", json={"title": "relay bench"},
                                  headers=self.headers)
                for _ in range(min(20, count - len(made)))))
            made += [answer.raise_for_status().json()["id"] for answer in answers]
        return made

    async def open(self, count: int) -> None:
        """`count` open connections, opened 50 at a time: no SYN overflows a listen backlog."""
        while len(self.connections) < count:
            self.connections.append(Connection(self.host, self.port))
        closed = [c for c in self.connections[:count] if not c.is_open]
        for start in range(0, len(closed), 50):
            await asyncio.gather(*(c.open() for c in closed[start:start + 50]))

    async def aclose(self) -> None:
        await self.control.aclose()
        for connection in self.connections:
            connection.close()

    async def stream(self, connection: Connection, tokens: int, conversation: int | None,
                     go: asyncio.Event, delay_s: float) -> Stream:
        stream, parser = Stream(), SSEParser()
        if self.path == DIRECT:
            request = ("/v1/chat/completions", _direct_body(tokens), {})

            def on_body(data: bytes, now: float) -> None:
                for event in parser.feed(data):
                    take_openai_event(stream, event.data, now)
        else:
            request = (f"/api/conversations/{conversation}/messages", PROMPT, self.headers)

            def on_body(data: bytes, now: float) -> None:
                for event in parser.feed(data):
                    take_relay_event(stream, event.event, event.data, now)

        await go.wait()
        if delay_s:
            await asyncio.sleep(delay_s)
        stream.sent_at = time.perf_counter()
        try:
            status = await connection.request("POST", request[0], request[1], on_body, request[2])
            if status != 200:
                stream.error = f"HTTP {status}"
        except Exception as error:  # counted, not raised: the round goes on
            stream.error = f"{type(error).__name__}: {error}"
        stream.check(tokens)
        return stream

    async def round(self, count: int, tokens: int, pids: dict[str, list[int]],
                    stagger_s: float = 0.0) -> Round:
        """`count` streams of `tokens` tokens, started at once or `stagger_s` apart; the CPU of
        each named group of processes meanwhile."""
        await self.open(count)
        ids = await self.conversations(count) if self.path == THROUGH else [None] * count
        go = asyncio.Event()
        tasks = [asyncio.create_task(self.stream(c, tokens, i, go, n * stagger_s))
                 for n, (c, i) in enumerate(zip(self.connections, ids))]
        await asyncio.sleep(0)  # every stream is now waiting for the start
        pids = {**pids, "client": [os.getpid()]}
        before = {name: sum(map(process_ticks, group)) for name, group in pids.items()}
        with ForeignLoad([pid for group in pids.values() for pid in group]) as load:
            started = time.perf_counter()
            go.set()
            streams = await asyncio.gather(*tasks)
            wall = time.perf_counter() - started
        hz = os.sysconf("SC_CLK_TCK")
        cpu = {name: (sum(map(process_ticks, group)) - before[name]) / hz
               for name, group in pids.items()}
        return Round(list(streams), wall, cpu, load.cores)
