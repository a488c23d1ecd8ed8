"""Fault injection: a task cancelled at the moment a command it sends to Redis has gone out.

That moment is one turn of the event loop wide, so it cannot be hit on demand; here the next
write to any stream (the layer's command) cancels the task as it completes. Under Python 3.11,
redis-py sends a command with `asyncio.wait_for` when the connection has a socket timeout, and
that `wait_for` returns the send's result instead of raising a cancellation that arrives as the
send completes (CPython gh-86296): the cancellation is lost, and a channels_redis receive then
waits for ever. A test loop's close hung 300 s on exactly that (make test, 2026-12-06).
"""

import asyncio


def cancel_as_next_sent(monkeypatch, task: asyncio.Task) -> None:
    """`task` is cancelled as the next write to a stream in this process completes (once)."""
    drain = asyncio.StreamWriter.drain
    armed = [task]

    async def drained_then_cancelled(writer):
        await drain(writer)
        if armed:
            armed.pop().cancel()

    monkeypatch.setattr(asyncio.StreamWriter, "drain", drained_then_cancelled)
