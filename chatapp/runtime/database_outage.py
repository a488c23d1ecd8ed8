"""A write that must outlast the database being down for a while (a restart, a failover).

A relay holds the only copy of an answer's end until its final write lands. When the database
refuses that write (no session can be opened, or the one it had was ended), the write is tried
again: at once first (a dropped connection is replaced by then, chatapp/runtime/database_threads.py),
then more slowly, up to once a second, until it lands or CHAT_DATABASE_PATIENCE_SECONDS have
passed. Trying a write again is the caller's call: the relay's final write may be, as one that
committed is final and a second one is then dropped.

What is only tried again later (a partial save, a relay's heartbeat, a watch's read of the rows)
logs a refusal in one line (`log_failure`): an outage repeats it at every try.
"""

import asyncio
import logging
import sys
import time
from collections.abc import Awaitable, Callable

from django.conf import settings
from django.db import InterfaceError, OperationalError

logger = logging.getLogger(__name__)

# Seconds before each new try; the last one repeats.
RETRY_DELAYS_S = (0.0, 0.25, 0.5, 1.0)


async def outlasting_an_outage(write: Callable[[], Awaitable], what: str):
    """`await write()`, tried again while the database refuses it, for up to
    CHAT_DATABASE_PATIENCE_SECONDS; then its last refusal is raised."""
    deadline = time.monotonic() + settings.CHAT_DATABASE_PATIENCE_SECONDS
    refusals = 0
    while True:
        try:
            result = await write()
        except (InterfaceError, OperationalError) as refusal:
            delay = RETRY_DELAYS_S[min(refusals, len(RETRY_DELAYS_S) - 1)]
            refusals += 1
            if time.monotonic() + delay > deadline:
                raise
            if refusals in (1, 2):  # the first may be a dropped connection, the second an outage
                logger.warning("%s met a database that refused it (%s); tried again", what, refusal)
            await asyncio.sleep(delay)
            continue
        if refusals > 1:
            logger.warning("%s landed after %d refusals", what, refusals)
        return result


def log_failure(log: logging.Logger, message: str, *args) -> None:
    """In an `except` block: a refusal by the database (down, restarting) as one warning line, as
    an outage repeats it at every try (each save, each beat, each read); anything else with its
    traceback."""
    error = sys.exc_info()[1]
    if isinstance(error, (InterfaceError, OperationalError)):
        log.warning(f"{message}: the database refused it (%s)", *args, error)
    else:
        log.exception(message, *args)
