"""Work that must finish even when its caller is cancelled: the final writes of an answer."""

import asyncio


async def to_the_end(work):
    """Runs `work` (a coroutine) to its end even when cancelled meanwhile; the cancellation
    then follows, once the work is done."""
    work = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        await work
        raise
