"""The JSON API: thin views that validate input, call a service or selector, and shape output.

Session authentication, CSRF on every unsafe method (Django's middleware), and every object
scoped to its owner. Errors before any stream starts are `{"error": {"code", "message"}}` with
the right status; after the first byte they travel as stream events (see chatapp/streaming/relay.py).
"""

import contextlib
import functools
import time

from django.conf import settings
from django.http import HttpResponse, JsonResponse, StreamingHttpResponse

from common.vocabulary import CancelledBy, GenerationStatus

from . import api_door, conversation_cursor, conversation_settings, json_shapes, request_input, selectors, services
from .api_door import body_of, endpoint
from .errors import STREAMS_RETRY_AFTER_SECONDS, ApiError
from .runtime import user_shares
from .runtime.database_threads import on_database_thread
from .staff import live_view
from .staff import permissions as staff_permissions
from .staff import selectors as staff_selectors
from .staff import services as staff_services
from .streaming import answer_start, prompt_fit, sse, text_proof, watch
from .streaming.relay import Relay
from .streaming.relay_inbox import tell_relay_to_stop
from .upstream import models as upstream_models
from .upstream.inference_client import UpstreamRefused

# A search's longest text, as the page's search box holds (index.html): each character of it
# multiplies the cost of matching every message.
MAX_QUERY_CHARS = 500


def answer_endpoint(plan_answer):
    """A POST whose answer streams: `plan_answer(request, user, **url_kwargs)` decides every
    refusal and what to ask the model from one read on a database thread, and the user is
    looked up in that same call (each hand-off to a thread costs time in front of the first token)."""

    @functools.wraps(plan_answer)
    async def streamed(request, *args, **kwargs):
        return await stream_answer(lambda: plan_answer(request, api_door.user_of(request), *args, **kwargs),
                                   request.session.session_key)

    return api_door.json_errors(("POST",), streamed)


# --- models ---
@endpoint("GET")
async def models(request, user):
    """The models the upstreams serve now, for the page's picker, and the settings' bounds."""
    await upstream_models.fresh(waits=True)
    last_used = await on_database_thread(selectors.last_used_model)(user=user)
    return JsonResponse({"models": [_model_json(name) for name in upstream_models.names()],
                         "default_model": settings.CHAT_MODEL, "last_used_model": last_used,
                         **conversation_settings.limits_json()})


def _model_json(name: str) -> dict:
    # The upstream's own entry (vLLM's says max_model_len), its owner and dates left out.
    entry = upstream_models.entry(name) or {}
    return {"id": name, "max_model_len": entry.get("max_model_len")}


# --- conversations ---
@endpoint("GET", "POST")
async def conversations(request, user):
    if request.method == "POST":
        body = body_of(request)
        title, choices = request_input.text(body, "title", ""), await _choices(body)
        created = await on_database_thread(services.conversation_create)(owner=user, title=title, choices=choices)
        return JsonResponse(json_shapes.conversation_json(created), status=201)
    after = _place_after(request.GET)
    query = request_input.query_text(request, "q").strip()
    if len(query) > MAX_QUERY_CHARS:
        raise ApiError(400, "query_too_long", f"a search may be at most {MAX_QUERY_CHARS} characters")
    async with user_shares.one_search_at_a_time(user.pk) if query else contextlib.nullcontext():
        page = await on_database_thread(_conversation_page)(user, query, after)
    return JsonResponse(page)


def _place_after(params) -> tuple | None:
    """The place in the list that the query parameter `after` names (None: the first page)."""
    # Numbered pages shift under a delete elsewhere (selectors.conversation_list). The first is
    # the first page still: a tab loaded before an upgrade lists the conversations it asks for
    # at its start, and only its Show older is told to reload.
    if params.get("page", "1") != "1":
        raise ApiError(400, "invalid_value", "page is not taken: read the next page with after=<next>, "
                                             "the cursor the page before gave")
    if "after" not in params:
        return None
    try:
        return conversation_cursor.place_of(params["after"])
    except ValueError:
        raise ApiError(400, "invalid_cursor", "after must be a cursor the conversation list gave "
                                              "(its next), sent back as it came") from None


async def _choices(body: dict, current_model: str | None = None) -> dict:
    """The conversation settings in `body`, checked; a model other than the conversation's
    `current_model` (kept while other settings change, even once gone) must be served now."""
    choices = conversation_settings.checked(body)
    if choices.get("model", current_model) != current_model:
        await upstream_models.known(choices["model"])
    return choices


def _conversation_page(user, query: str, after: tuple | None) -> dict:
    found = selectors.conversation_list(user=user, query=query, after=after)
    last = found.conversations[-1] if found.has_more else None
    return {"results": [{**json_shapes.conversation_json(c),
                         "live_generation_id": c.live_generation_id} for c in found.conversations],
            "next": None if last is None else conversation_cursor.cursor_of(last)}


@endpoint("GET", "PATCH", "DELETE")
async def conversation(request, user, conversation_id: int):
    found = await on_database_thread(selectors.conversation_get)(user=user, conversation_id=conversation_id)
    if request.method == "DELETE":
        stopped = await on_database_thread(services.conversation_delete)(conversation=found)
        for generation_id in stopped:
            tell_relay_to_stop(generation_id)
        return HttpResponse(status=204)
    if request.method == "PATCH":
        body = body_of(request)
        title = request_input.text(body, "title", None)
        choices = await _choices(body, current_model=found.model_name)
        found = await on_database_thread(services.conversation_update)(
            conversation=found, title=title, choices=choices)
    return JsonResponse(json_shapes.conversation_json(found))


async def messages(request, conversation_id: int):
    """GET lists the conversation's messages; POST sends one, and its answer streams."""
    view = send_message if request.method == "POST" else message_list
    return await view(request, conversation_id=conversation_id)


@endpoint("GET", "POST")  # a POST goes to send_message; both are named in the 405 answer
async def message_list(request, user, conversation_id: int):
    """A page of the conversation's messages: the newest, or (`before`) those before one of them."""
    before = _cursor(request.GET.get("before"))
    limit = _page_size(request.GET.get("limit"))
    return JsonResponse(await on_database_thread(_message_page)(user, conversation_id, before, limit))


def _message_page(user, conversation_id: int, before: int | None, limit: int) -> dict:
    found = selectors.conversation_get(user=user, conversation_id=conversation_id)
    try:
        page = selectors.message_page(conversation=found, before=before, limit=limit)
    except selectors.UnknownCursor:
        raise ApiError(400, "invalid_cursor", f"this conversation holds no message {before} (deleted since?): "
                                              "read its newest page again") from None
    return {"conversation": json_shapes.conversation_json(found),
            "results": [json_shapes.message_json(m) for m in page.messages], "has_older": page.has_older}


def _cursor(value: str | None) -> int | None:
    if value is None:
        return None
    message_id = request_input.count(value, request_input.MAX_ID)
    if not message_id:
        raise ApiError(400, "invalid_cursor", "before must be the id of a message: a whole number from 1")
    return message_id


def _page_size(value: str | None) -> int:
    if value is None:
        return selectors.MESSAGE_PAGE_SIZE
    limit = request_input.count(value)
    if not limit or limit > selectors.MAX_MESSAGE_PAGE_SIZE:
        raise ApiError(400, "invalid_value", f"limit must be a whole number from 1 to {selectors.MAX_MESSAGE_PAGE_SIZE}")
    return limit


def _shown_last(body: dict) -> services.ShownLast | None:
    """The last message the page shows, as it read it (docs/api.md: regenerate), if it says."""
    message_id = request_input.row_id(body, "last_message_id")
    if message_id is None:
        return None
    return services.ShownLast(message_id, request_input.char_count(body, "last_message_chars"))


# The answer views run on a database thread, whole (see answer_endpoint): they only read; the
# place their answer claims is taken after, in the same hand-off (stream_answer).
@answer_endpoint
def send_message(request, user, conversation_id: int) -> services.AnswerPlan:
    content = request_input.text(body_of(request), "content", "")
    found = selectors.conversation_get(user=user, conversation_id=conversation_id)
    return services.message_send(user=user, conversation=found, content=services.validate_content(content))


@answer_endpoint
def regenerate(request, user, conversation_id: int) -> services.AnswerPlan:
    body = body_of(request)
    model = request_input.text(body, "model", None)
    found = selectors.conversation_get(user=user, conversation_id=conversation_id)
    return services.answer_regenerate(user=user, conversation=found, model=model,
                                      shown_last=_shown_last(body))


@answer_endpoint
def edit(request, user, message_id: int) -> services.AnswerPlan:
    body = body_of(request)
    content = request_input.text(body, "content", "")
    found = selectors.message_get(user=user, message_id=message_id)
    return services.message_edit_and_resend(
        user=user, message=found, content=services.validate_content(content), shown_last=_shown_last(body))


@answer_endpoint
def continue_answer(request, user, message_id: int) -> services.AnswerPlan:
    found = selectors.message_get(user=user, message_id=message_id)
    return services.answer_continue(user=user, message=found)


@endpoint("GET")
async def generation(request, user, generation_id: int):
    found = await on_database_thread(selectors.generation_get)(user=user, generation_id=generation_id)
    return JsonResponse(json_shapes.generation_json(found))


@endpoint("GET")
async def generation_events(request, user, generation_id: int):
    """The watch stream: another page follows an answer it did not start, or (`from`, the
    characters of it the page holds) its own page resumes it (chatapp/streaming/watch.py)."""
    offset = _offset(request.GET.get("from"))
    found = await on_database_thread(selectors.generation_get)(user=user, generation_id=generation_id)
    held = user_shares.WATCHES.held_by(user.pk, watch.events(found, offset, request.session.session_key))
    if held is None:
        raise ApiError(429, "too_many_watches", f"at most {user_shares.WATCHES.limit()} watch streams may "
                                                "be open at once; close one and try again",
                       retry_after_s=STREAMS_RETRY_AFTER_SECONDS)
    return event_stream(held)


def _offset(value: str | None) -> int | None:
    if value is None:
        return None
    offset = request_input.count(value)
    if offset is None:
        raise ApiError(400, "invalid_value", f"from must be an integer from 0 to {request_input.MAX_CHARS}")
    return offset


@endpoint("POST")
async def stop(request, user, generation_id: int):
    """Stop with the number of characters (code points) of this generation the user saw."""
    found = await on_database_thread(selectors.generation_get)(user=user, generation_id=generation_id)
    seen = request_input.char_count(body_of(request), "seen_chars")
    if seen is None:
        raise ApiError(400, "invalid_value",
                       f"seen_chars must be an integer from 0 to {request_input.MAX_CHARS}")
    return await _stopped(found, seen_chars=seen, cancelled_by=CancelledBy.USER)


@endpoint("POST")
async def recover(request, user, generation_id: int):
    """The text this page was sent of an answer that lost it (its relay died between two partial
    saves), handed back piece by piece with the proofs it came with (streaming/text_proof.py)."""
    found = await on_database_thread(selectors.generation_get)(user=user, generation_id=generation_id)
    pieces = text_proof.proven_pieces(body_of(request).get("pieces"), found.pk)
    recovered = await on_database_thread(services.generation_recover)(generation_id=found.pk, pieces=pieces)
    return JsonResponse(json_shapes.generation_json(recovered))


async def _stopped(generation, *, seen_chars: int | None, cancelled_by: CancelledBy) -> JsonResponse:
    """Records the Stop and tells the relay, wherever it runs; 202, as the relay applies it."""
    try:
        stopping = await on_database_thread(services.generation_stop)(
            generation=generation, seen_chars=seen_chars, cancelled_by=cancelled_by)
    except services.IllegalTransition as refused:
        raise ApiError(409, "generation_ended",
                       f"the answer has already ended ({refused.status}); nothing was changed") from None
    if stopping.status == GenerationStatus.STOPPED:  # applied to an answer ended, whose day may be rolled up
        await on_database_thread(staff_services.late_stop_counted)(generation=stopping)
    tell_relay_to_stop(generation.pk)
    return JsonResponse({"id": generation.pk, "status": stopping.status}, status=202)


# --- staff: the live view (chatapp/staff/live_view.py) ---
async def staff_only(user, *permissions: str) -> None:
    if not await on_database_thread(staff_permissions.may)(user, *permissions):
        raise ApiError(403, "staff_only", f"only staff granted {' and '.join(permissions)} may use this")


@endpoint("GET")
async def live_events(request, user):
    """Every answer streaming now and each inference replica's load, every interval, as SSE."""
    await staff_only(user, staff_permissions.REVIEW_ANSWERS)
    may_still_review = on_database_thread(staff_selectors.may_still_review)
    return event_stream(live_view.events(
        lambda: may_still_review(user_id=user.pk, session=request.session)))


@endpoint("POST")
async def staff_stop(request, user, generation_id: int):
    """An admin's Stop of anyone's answer: as the user's, but the user keeps all they were sent."""
    await staff_only(user, staff_permissions.REVIEW_ANSWERS, staff_permissions.STOP_ANSWERS)
    found = await on_database_thread(staff_selectors.generation_of_anyone)(generation_id=generation_id)
    return await _stopped(found, seen_chars=None, cancelled_by=CancelledBy.ADMIN)


# --- streaming ---
async def stream_answer(plan_answer, session_key: str | None) -> StreamingHttpResponse:
    """Decides every refusal first, then opens the upstream and writes the rows at once, and
    only once both are done starts our stream (see chatapp/streaming/answer_start.py). The
    answer is the user's; `session_key`'s session asked it, and its end stops it (relay.py)."""
    started = time.monotonic()
    plan = await answer_start.planned_with_a_place(plan_answer)
    async with answer_start.place_held(plan):
        # A model picked for this answer must be known; the conversation's own may have gone since.
        await (upstream_models.still_served if plan.chosen_model is None else upstream_models.known)(plan.model)
        await prompt_fit.fit(plan)
        try:
            start, upstream = await answer_start.begin(plan)
        except UpstreamRefused as refusal:
            raise ApiError(refusal.status, refusal.code, refusal.message, refusal.retry_after_s) from refusal
    return event_stream(await Relay(start, upstream, started, session_key).stream())


def event_stream(events) -> StreamingHttpResponse:
    """Server-sent events, neither cached nor buffered by a proxy on the way."""
    response = StreamingHttpResponse(sse.failures_as_events(events), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response
