"""The partial answers of this process's relays, saved together as they are ready.

A relay hands in its answer's text at most once per CHAT_SAVE_INTERVAL_SECONDS (a crash loses at
most one interval). One writer saves everything handed in since its last write, in one
transaction on a database thread; what comes in meanwhile waits for the next write. No timer:
with one answer streaming that is one write per hand-in, as before; with 500 it is a few writes
a second instead of 500 transactions, whose cost on the database threads (and on the event loop,
through the GIL) made text wait: at 500 streams the gap between two events was 90 ms at the
median and 224-282 ms at p99 with them, 46 and 171 ms with one writer.

A relay withdraws before its final write: its text still waiting here is dropped, and a write
that holds it is waited for, so that no partial save lands after the final one.

What each write committed is remembered until the relay withdraws (`saved_chars`): the relay
tells its page, which then need not keep the proven pieces of that text to hand back.
"""

import asyncio
import logging

from .. import services
from ..runtime.database_outage import log_failure
from ..runtime.database_threads import on_database_thread
from ..runtime.per_loop import per_loop

logger = logging.getLogger(__name__)


class PartialSaves:
    def __init__(self):
        self._waiting: dict[int, services.PartialText] = {}
        self._in_write: frozenset[int] = frozenset()
        self._written = asyncio.Event()  # set when the write of `_in_write` has ended
        self._writer: asyncio.Task | None = None
        self._saved: dict[int, int] = {}  # generation -> code points of its own text stored

    def hand_in(self, partial: services.PartialText) -> None:
        """Saved by the next write; a newer text of the same answer replaces one still waiting."""
        self._waiting[partial.generation_id] = partial
        if self._writer is None:
            self._writer = asyncio.create_task(self._write_while_waiting())

    def saved_chars(self, generation_id: int) -> int:
        """How much of the answer's own text a write here has committed (code points)."""
        return self._saved.get(generation_id, 0)

    async def withdraw(self, generation_id: int) -> None:
        """Nothing of this answer is saved here after this returns."""
        self._waiting.pop(generation_id, None)
        if generation_id in self._in_write:
            await self._written.wait()
        self._saved.pop(generation_id, None)

    async def settled(self) -> None:
        """Returns once everything handed in has been written (or its write failed)."""
        while self._writer is not None:
            await asyncio.shield(self._writer)  # a waiter that is cancelled leaves the writer be

    async def _write_while_waiting(self) -> None:
        save = on_database_thread(services.generation_save_partials)
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, {}
                self._in_write, self._written = frozenset(batch), asyncio.Event()
                try:
                    written = await save(partials=list(batch.values()))
                    for generation_id in written:
                        self._saved[generation_id] = len(batch[generation_id].text)
                except Exception:  # a failed coarse save must not end a stream; the final save follows
                    log_failure(logger, "saving the partial answers of %d generation(s) failed", len(batch))
                finally:
                    self._in_write = frozenset()
                    self._written.set()
        finally:
            self._writer = None


# This event loop's (one per process in daphne; tests run a loop each).
partial_saves = per_loop(PartialSaves)
