"""The start of an answer: the upstream request, then the rows' write.

Every refusal of ours is decided before (services' plan, one read, and the user's place claimed
among the answers streaming at once: services/stream_claims.py). The upstream is asked first,
and the rows are written once it took the request: its answer's head comes before the model has
read the prompt, so the write still runs while the model does, and the first byte waits for both,
so the rows are committed before any text is shown. An upstream refusal therefore changes
nothing the user had: an edit's later messages, a regenerated answer and a truncated one stay as
they were, and the refusal leaves only its failed audit row, of no message. The write checks
again under the user's lock: a start that lost a race to another one is refused there, and its
upstream is closed (the engine frees the sequence). A browser that leaves meanwhile finds it
cleaned up: the upstream closed, a row already written ended as cancelled by client_gone, or an
audit row of no message saying so where none was written.
"""

import asyncio
import contextlib
import logging
from collections.abc import Callable

from common.vocabulary import CancelledBy

from .. import services
from ..runtime.database_outage import log_failure
from ..runtime.database_threads import on_database_thread
from ..runtime import web_process
from ..runtime.to_the_end import to_the_end
from ..upstream import token_counts
from ..upstream.inference_client import UpstreamRefused, UpstreamStream

logger = logging.getLogger(__name__)
_CLIENT_GONE = services.Outcome(cancelled_by=CancelledBy.CLIENT_GONE)


async def planned_with_a_place(plan_answer: Callable[[], services.AnswerPlan]) -> services.AnswerPlan:
    """The plan, and one of the user's places among the answers streaming at once, claimed in the
    same hand-off to a database thread (each costs time in front of the first token), before
    anything goes upstream (services.stream_claim)."""
    planning = asyncio.ensure_future(on_database_thread(_plan_and_claim)(plan_answer))
    try:
        await asyncio.wait({planning})  # a database call cannot be called back: it is waited for
    except asyncio.CancelledError:  # the browser left: a place claimed meanwhile is given back
        await to_the_end(_place_given_back_once_planned(planning))
        raise
    return planning.result()


def _plan_and_claim(plan_answer: Callable[[], services.AnswerPlan]) -> services.AnswerPlan:
    plan = plan_answer()
    services.stream_claim(user=plan.user, request_id=plan.request_id)
    return plan


async def _place_given_back_once_planned(planning: asyncio.Future) -> None:
    try:
        plan = await planning
    except Exception:
        return  # refused: nothing was claimed
    await _place_given_back(plan)


@contextlib.asynccontextmanager
async def place_held(plan: services.AnswerPlan):
    """The user's place the plan claimed (services.stream_claim), while its start goes on: the
    write takes it over; a start refused or abandoned before that gives it back at once (one the
    database refuses to give back stops counting after its lifetime)."""
    try:
        yield
    except BaseException:
        await to_the_end(_place_given_back(plan))
        raise


async def _place_given_back(plan: services.AnswerPlan) -> None:
    try:
        await on_database_thread(services.stream_claim_release)(user=plan.user, request_id=plan.request_id)
    except Exception:
        log_failure(logger, "giving back the stream place of request %s failed", plan.request_id)


async def begin(plan: services.AnswerPlan) -> tuple[services.AnswerStart, UpstreamStream]:
    """The open upstream and the written rows; raises the upstream's refusal (its audit row
    then written) or the write's (the upstream then closed)."""
    try:
        upstream = await UpstreamStream.open(_payload(plan), str(plan.request_id))
    except asyncio.CancelledError:  # the browser left; the request went with its connection
        await to_the_end(_unstarted(plan, _CLIENT_GONE))
        raise
    except Exception as failure:
        refusal = failure if isinstance(failure, UpstreamRefused) else UpstreamRefused(
            502, "upstream_error", f"opening the upstream stream failed ({failure!r})")
        await _unstarted(plan, services.Outcome(error_code=refusal.code,
                                                error_message=refusal.message))
        raise
    plan.relay_process = web_process.relay_process()  # this one: its death orphans the answer
    plan.prompt_tokens = upstream.prompt_tokens  # stored from the start: the reaper may end it
    writing = asyncio.ensure_future(on_database_thread(services.answer_write)(plan=plan))
    try:
        await asyncio.wait({writing})  # a database call cannot be called back: it is waited for
    except asyncio.CancelledError:  # the browser left
        await to_the_end(_abandon(upstream, writing))
        raise
    if writing.exception() is not None:
        await upstream.aclose()
        raise writing.exception()
    return writing.result(), upstream


def _payload(plan: services.AnswerPlan) -> dict:
    return {**token_counts.template_body(plan.model, plan.prompt, plan.continue_final_message),
            "stream": True, "stream_options": {"include_usage": True}, **plan.sampling}


async def _unstarted(plan: services.AnswerPlan, outcome: services.Outcome) -> None:
    await on_database_thread(services.answer_unstarted)(plan=plan, outcome=outcome)


async def _abandon(upstream: UpstreamStream, writing: asyncio.Future) -> None:
    with contextlib.suppress(Exception):
        await upstream.aclose()
    try:
        start = await writing
    except Exception:
        return  # nothing was written
    await on_database_thread(services.generation_finish)(generation_id=start.generation.pk,
                                                         outcome=_CLIENT_GONE)
