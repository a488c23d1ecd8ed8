"""This web process, and whether the one that relays an answer is still there.

An answer's row names the web process that relays it (`Generation.relay_process`). While it
lives, each web process keeps a key of its own in the shared cache (Redis), rewritten by a
thread, not on the event loop: a loop busy for seconds is not a dead process. An answer whose
relay's process has lost its key is orphaned (the process was killed, crashed, or its machine
went), and the reaper ends it within seconds (chatapp/tasks.py) instead of waiting for its
heartbeat to go stale (CHAT_STALE_STREAM_SECONDS, a minute), during which a page that resumed
it would say "Writing…" over nothing.

A key can also vanish with Redis itself (a restart without persistence): a process is taken
for gone only once its key has stayed missing for as long again as it lives (four of its
rewrites), so a live one has written it again by then. A process paused (SIGSTOP, a VM
migrating) for less than that is no death either. So an answer whose process died ends some
20 s later at the defaults (10 s for the key to expire, 10 s more missing, the reaper's round).

The key also lists the answers whose relay runs in the process now. An answer whose heartbeat
went stale while its relay still runs is alive all the same: the database refused its beats (an
outage longer than CHAT_STALE_STREAM_SECONDS), and the reaper, reaching the database again
before the relay does, must not end it; a relay that ended without its final write (its process
still up) is no longer listed, and its answer is reaped for its heartbeat.

Without Redis a stack has one web process (stack/web.py), but two stacks of one checkout on two
ports share its SQLite file, and nothing shared holds keys: each web process holds a file of the
checkout locked instead (runtime/presence_file.py, settings.CHAT_WEB_PROCESS_DIR), which the
kernel unlocks when the process dies. An answer whose process's file is unlocked is orphaned, at
once; one whose process left no file here (another machine's, another checkout's) is left to the
heartbeat, as are rows whose relay named no process (written by something that never announced
itself, a test's own relay).
"""

import asyncio
import atexit
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable

from django.conf import settings
from django.core.cache import cache

from .presence_file import PresenceFile, forget_gone, gone as unlocked

logger = logging.getLogger(__name__)

ID = uuid.uuid4().hex  # this process's, for as long as it runs (a restart is another process)
_HERE, _MISSING = "chatapp:web-process:{}", "chatapp:web-process-missing:{}"
_announced = threading.Event()
# The generations whose relay runs here (the event loop's thread adds), each with how to end it
# when the process is told to stop.
_relaying: dict[int, Callable[[], None]] = {}
_last_relay_ended: asyncio.Event | None = None  # while stopping: set once none runs


def presence_shared() -> bool:
    """Web processes see each other's keys: the cache is Redis (see settings.CACHES)."""
    return bool(settings.REDIS_URL)


def _rewrite_interval() -> float:
    return settings.CHAT_WEB_PROCESS_TTL_SECONDS / 4


def announce() -> None:
    """Called once the process serves answers (chatapp/asgi.py): from then on the answers it
    starts name it, and its key is kept. The first write is made before this returns, so no
    row names a process whose key was never written."""
    if _announced.is_set():
        return
    if presence_shared():
        try:
            _say_here()
        except Exception:  # Redis away: its thread writes it once Redis is back, and until then
            logger.exception("announcing this web process failed")  # no reaper can read either
        threading.Thread(target=_keep_saying_here, name="web-process-presence", daemon=True).start()
    else:
        atexit.register(PresenceFile(settings.CHAT_WEB_PROCESS_DIR, ID).release)
    _announced.set()


def relay_process() -> str:
    """What a new answer's row records as its relay's process: '' until this one announced."""
    return ID if _announced.is_set() else ""


def relay_began(generation_id: int, on_shutdown: Callable[[], None]) -> None:
    _relaying[generation_id] = on_shutdown


def relay_ended(generation_id: int) -> None:
    _relaying.pop(generation_id, None)
    if not _relaying and _last_relay_ended is not None:
        _last_relay_ended.set()


async def relays_ended_for_shutdown(timeout_s: float) -> None:
    """The process is told to stop (SIGTERM): every relay running here is asked to end its
    answer as the server's stop, and this waits, at most `timeout_s`, for their final writes. A
    relay that cannot write in time (the database away) is left to the reaper, as a killed one."""
    global _last_relay_ended
    _last_relay_ended = asyncio.Event()
    for end in list(_relaying.values()):
        end()
    if _relaying:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await _last_relay_ended.wait()


def relays_running(process_ids: set[str]) -> set[int]:
    """The generations whose relay runs in one of these web processes, as their keys said last;
    none when that cannot be told (the cache is away, or per process)."""
    if not process_ids or not presence_shared():
        return set()
    try:
        said = cache.get_many([_HERE.format(process) for process in process_ids]).values()
    except Exception:  # nothing is known while the cache is away: the heartbeat still counts
        logger.exception("reading the web processes' relays failed")
        return set()
    return {generation_id for relays in said if isinstance(relays, list) for generation_id in relays}


def gone(process_ids: set[str]) -> set[str]:
    """Of these web processes, the ones known to be gone; none when that cannot be told (the
    cache is away)."""
    if not process_ids:
        return set()
    if not presence_shared():
        return unlocked(settings.CHAT_WEB_PROCESS_DIR, process_ids)
    try:
        return _missing_for_a_while(process_ids)
    except Exception:  # nothing is known while the cache is away: the heartbeat still counts
        logger.exception("reading the web processes' presence failed")
        return set()


def forget(keeping: set[str]) -> None:
    """Without Redis, forgets the gone web processes but those named in `keeping` (by live
    answers, to be ended first); with Redis their keys expire on their own."""
    if not presence_shared():
        forget_gone(settings.CHAT_WEB_PROCESS_DIR, keeping)


def _missing_for_a_while(process_ids: set[str]) -> set[str]:
    present = cache.get_many([_HERE.format(process) for process in process_ids])
    missing = {process for process in process_ids if _HERE.format(process) not in present}
    cache.delete_many([_MISSING.format(process) for process in process_ids - missing])
    now = time.time()
    for process in missing:  # when it was first seen missing, kept by the first look
        cache.add(_MISSING.format(process), now, timeout=settings.CHAT_WEB_PROCESS_TTL_SECONDS * 10)
    since = cache.get_many([_MISSING.format(process) for process in missing])
    return {process for process in missing
            if now - since.get(_MISSING.format(process), now) >= settings.CHAT_WEB_PROCESS_TTL_SECONDS}


def _say_here() -> None:
    relays = list(_relaying.copy())  # a copy taken at once: the loop's thread may add meanwhile
    cache.set(_HERE.format(ID), relays, timeout=settings.CHAT_WEB_PROCESS_TTL_SECONDS)


def _keep_saying_here() -> None:
    while True:
        time.sleep(_rewrite_interval())
        try:
            _say_here()
        except Exception:  # a connection Redis dropped (a restart) fails once: at once again
            try:
                _say_here()
            except Exception:  # Redis away: said again next round, well within the key's life
                logger.exception("keeping this web process's presence failed")
