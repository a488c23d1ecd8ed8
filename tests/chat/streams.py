"""Reading our SSE stream in tests."""

import asyncio
import json

from common.sse import SSEParser


async def read_events(response, gate=None) -> list[tuple[str, dict | None]]:
    """(event name, payload) for every event; heartbeat comments appear as ("ping", None).

    With the stand-in's `gate`, each delta read lets the upstream send its next chunk.
    """
    parser = SSEParser()
    events = []
    async for chunk in response.streaming_content:
        if chunk.startswith(b":"):
            events.append(("ping", None))
        for event in parser.feed(chunk):
            events.append((event.event, json.loads(event.data)))
            if gate is not None and event.event == "delta":
                gate.release()
    return events


async def stop_after_deltas(api, conversation, deltas: int, seen_chars: int, content: str = "go"):
    """Sends `content`, reads `deltas` delta events, then Stops with `seen_chars`.

    Returns (the Stop's response, the events read before it, the (name, payload) events after).
    """
    response = await api.post(f"/api/conversations/{conversation.pk}/messages",
                              json.dumps({"content": content}), content_type="application/json")
    parser, before = SSEParser(), []
    stream = response.streaming_content
    while len([e for e in before if e.event == "delta"]) < deltas:
        before += parser.feed(await anext(stream))
    generation_id = json.loads(before[0].data)["generation_id"]
    stopped = await api.post(f"/api/generations/{generation_id}/stop",
                             json.dumps({"seen_chars": seen_chars}), content_type="application/json")
    after = [(e.event, json.loads(e.data)) async for chunk in stream for e in parser.feed(chunk)]
    return stopped, before, after


async def stop_side_by_side(api, conversations, content: str) -> list[tuple[str, int, str]]:
    """Sends `content` to every conversation at once and Stops each answer after its second
    delta; returns for each (the model its start event names, the Stop's status code, the
    answer's final status)."""
    ended = await asyncio.gather(*(stop_after_deltas(api, conversation, deltas=2, seen_chars=1, content=content)
                                   for conversation in conversations))
    return [(json.loads(before[0].data)["model"], stop.status_code, after[-1][1]["status"])
            for stop, before, after in ended]


class EventReader:
    """Reads a test client's event stream a part at a time: (name, payload), pings as ("ping", None)."""

    def __init__(self, response):
        self._chunks = aiter(response.streaming_content)
        self._parser = SSEParser()
        self.events: list[tuple[str, dict | None]] = []

    async def until(self, condition) -> None:
        """Reads until `condition(events)` holds; the stream ending first fails the test."""
        while not condition(self.events):
            self._take(await anext(self._chunks))

    async def to_the_end(self) -> list[tuple[str, dict | None]]:
        async for chunk in self._chunks:
            self._take(chunk)
        return self.events

    def _take(self, chunk: bytes) -> None:
        if chunk.startswith(b":"):
            self.events.append(("ping", None))
        self.events += [(event.event, json.loads(event.data)) for event in self._parser.feed(chunk)]


def names(events) -> list[str]:
    return [name for name, _ in events]


def text_of(events) -> str:
    return "".join(payload["text"] for name, payload in events if name == "delta")


def shown(events) -> str:
    """The text a page watching an answer shows: a `prefix` replaces it, a `delta` adds to it."""
    text = ""
    for name, payload in events:
        if name == "prefix":
            text = payload["text"]
        elif name == "delta":
            text += payload["text"]
    return text


class Browser:
    """Speaks ASGI to the real app like a browser over daphne, and can hang up mid-stream."""

    CSRF_TOKEN = "a" * 32

    def __init__(self, api, path: str, method: str = "POST"):
        from asgiref.testing import ApplicationCommunicator
        from django.conf import settings

        from chatapp.asgi import application

        session_key = api.cookies[settings.SESSION_COOKIE_NAME].value
        cookies = f"{settings.SESSION_COOKIE_NAME}={session_key}; csrftoken={self.CSRF_TOKEN}"
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
            "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
            "root_path": "", "client": ("127.0.0.1", 50000), "server": ("testserver", 80),
            "headers": [(b"host", b"testserver"), (b"content-type", b"application/json"),
                        (b"cookie", cookies.encode()), (b"x-csrftoken", self.CSRF_TOKEN.encode())],
        }
        self.app = ApplicationCommunicator(application, scope)
        self.parser = SSEParser()
        self.events: list[tuple[str, dict]] = []
        self.status: int | None = None

    async def post(self, body: dict) -> None:
        await self.send(body)
        self.status = (await self.app.receive_output(timeout=10))["status"]

    async def get(self) -> None:
        await self.app.send_input({"type": "http.request", "body": b""})
        self.status = (await self.app.receive_output(timeout=10))["status"]

    async def send(self, body: dict) -> None:
        """The request, without waiting for the answer to start."""
        await self.app.send_input({"type": "http.request", "body": json.dumps(body).encode()})

    async def read_until(self, deltas: int = 0, events: tuple[str, ...] = (), text: str = "") -> None:
        """Reads until `deltas` delta events, every event named in `events`, and at least as
        much text as `text` have come. (A relay that falls behind sends chunks that queued up as
        one delta: where the upstream then goes quiet, count the text, not the deltas.)"""
        while (len([name for name, _ in self.events if name == "delta"]) < deltas
               or not set(events) <= {name for name, _ in self.events}
               or len(text_of(self.events)) < len(text)):
            message = await self.app.receive_output(timeout=10)
            self.events += [(e.event, json.loads(e.data)) for e in self.parser.feed(message["body"])]

    async def hang_up(self) -> None:
        await self.app.send_input({"type": "http.disconnect"})
        await self.app.wait(timeout=10)
