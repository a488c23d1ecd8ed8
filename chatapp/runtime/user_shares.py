"""What one user may hold at once of this web process's shared capacity, so that one user's
searches or streams leave the others served: a search of their own text takes one of the
process's database threads at a time (`one_search_at_a_time`), and their watch streams at most
CHAT_MAX_WATCHES_PER_USER of its connections (`WATCHES`). Each web process counts its own:
nginx spreads a user's requests over them, so a user's whole share is that many times larger.
"""

import asyncio
import contextlib
import weakref
from collections import Counter
from collections.abc import AsyncIterator, Callable

from django.conf import settings

from .per_loop import per_loop

# A search lock stays while anyone holds or waits on it, and goes with the last of them.
_search_locks = per_loop(weakref.WeakValueDictionary)


@contextlib.asynccontextmanager
async def one_search_at_a_time(user_id: int):
    """A search of a user's text waits for their previous one (a long query over long messages
    can take a database thread for many seconds; the next user's search goes on meanwhile)."""
    locks = _search_locks()
    lock = locks.get(user_id)
    if lock is None:
        lock = locks[user_id] = asyncio.Lock()
    async with lock:
        yield


class StreamPlaces:
    """At most `limit()` streams of one user open at once in this process; another is refused
    before it starts. A place is given back when its stream ends or is closed, and when a stream
    never read is dropped (its page left before the stream began)."""

    def __init__(self, limit: Callable[[], int]):
        self.limit = limit
        self._held: Counter[int] = Counter()

    def held_by(self, user_id: int, events: AsyncIterator[bytes]) -> AsyncIterator[bytes] | None:
        """`events`, holding one of the user's places while they stream; None when none is free."""
        if self._held[user_id] >= self.limit():
            return None
        self._held[user_id] += 1
        given_back = False

        def give_back() -> None:
            nonlocal given_back
            if not given_back:
                given_back = True
                self._held[user_id] -= 1
                if not self._held[user_id]:
                    del self._held[user_id]

        async def holding():
            try:
                async with contextlib.aclosing(events):
                    async for chunk in events:
                        yield chunk
            finally:
                give_back()

        stream = holding()
        weakref.finalize(stream, give_back)  # never started, its `finally` never runs
        return stream


WATCHES = StreamPlaces(lambda: settings.CHAT_MAX_WATCHES_PER_USER)
