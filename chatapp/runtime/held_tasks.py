"""Tasks that nobody awaits, held until they end: the event loop keeps only weak references to
its tasks, so one with no other holder may be collected mid-flight."""

import asyncio
from collections.abc import Coroutine

_held: set[asyncio.Task] = set()


def held_until_done(work: Coroutine) -> asyncio.Task:
    """Runs `work` in a task of its own, held until it ends."""
    task = asyncio.ensure_future(work)
    _held.add(task)
    task.add_done_callback(_held.discard)
    return task


async def all_done() -> None:
    """Until every task held now in this event loop has ended, however it ended."""
    loop = asyncio.get_running_loop()
    await asyncio.gather(*(task for task in _held if task.get_loop() is loop), return_exceptions=True)
