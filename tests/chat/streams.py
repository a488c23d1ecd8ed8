"""Reading our SSE stream in tests."""

import json

from chatapp.sse import SSEParser


async def read_events(response) -> list[tuple[str, dict | None]]:
    """(event name, payload) for every event; heartbeat comments appear as ("ping", None)."""
    parser = SSEParser()
    events = []
    async for chunk in response.streaming_content:
        if chunk.startswith(b":"):
            events.append(("ping", None))
        events.extend((e.event, json.loads(e.data)) for e in parser.feed(chunk))
    return events


def names(events) -> list[str]:
    return [name for name, _ in events]


def text_of(events) -> str:
    return "".join(payload["text"] for name, payload in events if name == "delta")
