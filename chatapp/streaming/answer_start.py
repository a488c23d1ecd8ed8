"""The start of an answer: the upstream request and the rows' write, at the same time.

Every refusal of ours is decided before (services' plan, one read), so the model's prefill
overlaps our database write; the first byte waits for both, so the rows are committed before
any text is shown. The write checks again under the user's lock: a start that lost a race to
another one is refused there, and its upstream is closed (the engine frees the sequence). An
upstream refusal leaves its `failed` row. A browser that leaves meanwhile finds both cleaned
up: the upstream closed, a row already written ended as cancelled by client_gone.
"""

import asyncio
import contextlib

from django.conf import settings

from common.vocabulary import CancelledBy

from .. import services
from ..runtime.database_threads import on_database_thread
from ..runtime.to_the_end import to_the_end
from ..upstream import token_counts
from ..upstream.inference_client import UpstreamRefused, UpstreamStream


async def begin(plan: services.AnswerPlan) -> tuple[services.AnswerStart, UpstreamStream]:
    """The written rows and the open upstream; raises the write's refusal (the upstream then
    closed) or the upstream's (the rows then failed)."""
    opening = asyncio.ensure_future(UpstreamStream.open(_payload(plan), str(plan.request_id)))
    writing = asyncio.ensure_future(on_database_thread(services.answer_write)(plan=plan))
    try:
        await asyncio.wait({opening, writing})
        return await _settle(opening, writing)
    except asyncio.CancelledError:  # the browser left
        await to_the_end(_abandon(opening, writing))
        raise


def _payload(plan: services.AnswerPlan) -> dict:
    return {**token_counts.template_body(settings.CHAT_MODEL, plan.prompt, plan.continue_final_message),
            "stream": True, "stream_options": {"include_usage": True}, **plan.sampling}


async def _settle(opening: asyncio.Future, writing: asyncio.Future):
    if writing.exception() is not None:
        if opening.exception() is None:
            await opening.result().aclose()
        raise writing.exception()
    start = writing.result()
    failure = opening.exception()
    if failure is not None:
        refusal = failure if isinstance(failure, UpstreamRefused) else UpstreamRefused(
            502, "upstream_error", f"opening the upstream stream failed ({failure!r})")
        await _finish(start, services.Outcome(error_code=refusal.code, error_message=refusal.message))
        raise failure
    return start, opening.result()


async def _abandon(opening: asyncio.Future, writing: asyncio.Future) -> None:
    opening.cancel()  # a request still being sent is dropped with its connection
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await (await opening).aclose()
    try:
        start = await writing  # a database call cannot be called back: it is waited for
    except Exception:
        return  # nothing was written
    await _finish(start, services.Outcome(cancelled_by=CancelledBy.CLIENT_GONE))


async def _finish(start: services.AnswerStart, outcome: services.Outcome) -> None:
    await on_database_thread(services.generation_finish)(generation_id=start.generation.pk, outcome=outcome)
