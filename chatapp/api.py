"""The JSON API: thin views that validate input, call a service or selector, and shape output.

Session authentication, CSRF on every unsafe method (Django's middleware), and every object
scoped to its owner. Errors before any stream starts are `{"error": {"code", "message"}}` with
the right status; after the first byte they travel as stream events (see chatapp/streaming/relay.py).
"""

import contextlib
import functools
import logging
import time

from django.conf import settings
from django.contrib.auth import aauthenticate, alogin, alogout, get_user
from django.db import InterfaceError, OperationalError
from django.http import HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import ensure_csrf_cookie

from common.vocabulary import CancelledBy, GenerationStatus

from . import conversation_settings, json_shapes, login_limit, request_input, selectors, services
from .errors import STREAMS_RETRY_AFTER_SECONDS, ApiError, error_response
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

logger = logging.getLogger(__name__)

# A restart or a failover takes seconds: the page may try again after this many.
DATABASE_RETRY_AFTER_SECONDS = 5
# A search's longest text, as the page's search box holds (index.html): each character of it
# multiplies the cost of matching every message.
MAX_QUERY_CHARS = 500


def endpoint(*methods: str, login_required: bool = True):
    """A JSON view: it receives the request's user, looked up on a database thread."""

    def decorate(view):
        @functools.wraps(view)
        async def with_user(request, *args, **kwargs):
            user = await on_database_thread(user_of)(request, login_required)
            return await view(request, user, *args, **kwargs)

        return _json_errors(methods, with_user)

    return decorate


def answer_endpoint(plan_answer):
    """A POST whose answer streams: `plan_answer(request, user, **url_kwargs)` decides every
    refusal and what to ask the model from one read on a database thread, and the user is
    looked up in that same call (each hand-off to a thread costs time in front of the first token)."""

    @functools.wraps(plan_answer)
    async def streamed(request, *args, **kwargs):
        return await stream_answer(lambda: plan_answer(request, user_of(request), *args, **kwargs))

    return _json_errors(("POST",), streamed)


def _json_errors(methods: tuple[str, ...], view):
    """The method check, and an ApiError raised anywhere in the view as its JSON answer.

    Besides its own methods an address answers those HTTP asks of every server (RFC 9110 9.1):
    HEAD wherever GET (the views take it for GET), and OPTIONS; a 405 names them in `Allow`."""
    allowed = {*methods, "OPTIONS", *(("HEAD",) if "GET" in methods else ())}
    allow = ", ".join(sorted(allowed))

    @functools.wraps(view)
    async def checked(request, *args, **kwargs):
        if request.method not in allowed:
            response = error_response(405, "method_not_allowed", f"use {', '.join(methods)}")
        elif request.method == "OPTIONS":
            response = HttpResponse(headers={"Content-Length": "0"})
        else:
            try:
                response = await view(request, *args, **kwargs)
            except ApiError as error:
                response = error_response(error.status, error.code, error.message)
                if error.retry_after_s is not None:
                    response["Retry-After"] = str(error.retry_after_s)
            except (InterfaceError, OperationalError) as refusal:  # even after a fresh connection
                logger.warning("the database refused %s %s: %s", request.method, request.path, refusal)
                response = error_response(503, "database_unavailable",
                                          "the database is not answering; try again in a moment")
                response["Retry-After"] = str(DATABASE_RETRY_AFTER_SECONDS)
            if request.method == "HEAD":
                response = _head_of(response)
        response["Allow"] = allow
        return response

    return checked


def _head_of(response: HttpResponseBase) -> HttpResponseBase:
    """A HEAD's answer: the GET's status and headers without its body. A stream's is never
    started: the server would drop its bytes, and follow it to its end (a watch: for as long as
    the answer streams); its head is a stream of nothing, so that no Content-Length is added."""
    headers = dict(response.items())
    if response.streaming:
        head = StreamingHttpResponse(_no_events(), status=response.status_code, headers=headers)
    else:
        head = HttpResponse(status=response.status_code, headers=headers)
        head["Content-Length"] = str(len(response.content))
    head.cookies = response.cookies
    return head


async def _no_events():
    for nothing in ():
        yield nothing


def user_of(request, login_required: bool = True):
    """The session's user (session and user read in one go; request.auser() takes two hand-offs)."""
    user = get_user(request)
    if login_required and not user.is_authenticated:
        raise ApiError(401, "not_authenticated", "sign in first")
    return user


def body_of(request) -> dict:
    if request.content_type.startswith("multipart/"):  # parsed by the CSRF check, gone since
        raise ApiError(415, "unsupported_media_type",
                       "the API reads a JSON body (Content-Type: application/json), not a form")
    return request_input.json_object(request.body)


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


# --- session ---
@ensure_csrf_cookie
@endpoint("GET", login_required=False)
async def session(request, user):
    # The limits too, signed in or not: the page shows them before it sends, not after a 400.
    return JsonResponse({"user": json_shapes.user_json(user),
                         "limits": {"max_message_chars": settings.CHAT_MAX_MESSAGE_CHARS}})


@endpoint("POST", login_required=False)
async def login(request, user):
    body = body_of(request)
    signed_in = await aauthenticate(request, username=request_input.text(body, "username", ""),
                                    password=request_input.text(body, "password", ""))
    if signed_in is None:
        wait = getattr(request, login_limit.REFUSED_FOR, 0)
        if wait:
            refused = error_response(429, "too_many_attempts", f"too many failed sign-ins: try again in {wait} s")
            refused["Retry-After"] = str(wait)
            return refused
        raise ApiError(400, "invalid_credentials", "wrong username or password")
    await alogin(request, signed_in)
    return JsonResponse({"user": json_shapes.user_json(signed_in)})


@endpoint("POST")
async def logout(request, user):
    await alogout(request)
    return JsonResponse({"user": None})


# --- conversations ---
@endpoint("GET", "POST")
async def conversations(request, user):
    if request.method == "POST":
        body = body_of(request)
        title, choices = request_input.text(body, "title", ""), await _choices(body)
        created = await on_database_thread(services.conversation_create)(owner=user, title=title, choices=choices)
        return JsonResponse(json_shapes.conversation_json(created), status=201)
    query = request_input.query_text(request, "q").strip()
    if len(query) > MAX_QUERY_CHARS:
        raise ApiError(400, "query_too_long", f"a search may be at most {MAX_QUERY_CHARS} characters")
    async with user_shares.one_search_at_a_time(user.pk) if query else contextlib.nullcontext():
        page = await on_database_thread(_conversation_page)(user, query, request.GET.get("page", 1))
    return JsonResponse(page)


async def _choices(body: dict, current_model: str | None = None) -> dict:
    """The conversation settings in `body`, checked; a model other than the conversation's
    `current_model` (kept while other settings change, even once gone) must be served now."""
    choices = conversation_settings.checked(body)
    if choices.get("model", current_model) != current_model:
        await upstream_models.known(choices["model"])
    return choices


def _conversation_page(user, query: str, page) -> dict:
    found = selectors.conversation_list(user=user, query=query, page=page)
    return {"results": [{**json_shapes.conversation_json(c),
                         "live_generation_id": c.live_generation_id} for c in found],
            "page": found.number,
            "num_pages": found.paginator.num_pages, "count": found.paginator.count}


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
    found = await on_database_thread(selectors.conversation_get)(user=user, conversation_id=conversation_id)
    listed = await on_database_thread(selectors.message_list)(conversation=found)
    return JsonResponse({"conversation": json_shapes.conversation_json(found),
                         "results": [json_shapes.message_json(m) for m in listed]})


# The answer views run on a database thread, whole (see answer_endpoint): they only read.
@answer_endpoint
def send_message(request, user, conversation_id: int) -> services.AnswerPlan:
    content = request_input.text(body_of(request), "content", "")
    found = selectors.conversation_get(user=user, conversation_id=conversation_id)
    return services.message_send(user=user, conversation=found, content=services.validate_content(content))


@answer_endpoint
def regenerate(request, user, conversation_id: int) -> services.AnswerPlan:
    model = request_input.text(body_of(request), "model", None)
    found = selectors.conversation_get(user=user, conversation_id=conversation_id)
    return services.answer_regenerate(user=user, conversation=found, model=model)


@answer_endpoint
def edit(request, user, message_id: int) -> services.AnswerPlan:
    content = request_input.text(body_of(request), "content", "")
    found = selectors.message_get(user=user, message_id=message_id)
    return services.message_edit_and_resend(user=user, message=found, content=services.validate_content(content))


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
    held = user_shares.WATCHES.held_by(user.pk, watch.events(found, offset))
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
    seen = body_of(request).get("seen_chars")
    if isinstance(seen, bool) or not isinstance(seen, int) or not 0 <= seen <= request_input.MAX_CHARS:
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
async def staff_only(user, permission: str) -> None:
    if not await on_database_thread(staff_permissions.may)(user, permission):
        raise ApiError(403, "staff_only", f"only staff granted {permission} may use this")


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
    await staff_only(user, staff_permissions.STOP_ANSWERS)
    found = await on_database_thread(staff_selectors.generation_of_anyone)(generation_id=generation_id)
    return await _stopped(found, seen_chars=None, cancelled_by=CancelledBy.ADMIN)


# --- streaming ---
async def stream_answer(plan_answer) -> StreamingHttpResponse:
    """Decides every refusal first, then opens the upstream and writes the rows at once, and
    only once both are done starts our stream (see chatapp/streaming/answer_start.py)."""
    started = time.monotonic()
    plan = await on_database_thread(plan_answer)()
    # A model picked for this answer must be known; the conversation's own may have gone since.
    await (upstream_models.still_served if plan.chosen_model is None else upstream_models.known)(plan.model)
    await prompt_fit.fit(plan)
    try:
        start, upstream = await answer_start.begin(plan)
    except UpstreamRefused as refusal:
        raise ApiError(refusal.status, refusal.code, refusal.message, refusal.retry_after_s) from refusal
    return event_stream(await Relay(start, upstream, started).stream())


def event_stream(events) -> StreamingHttpResponse:
    """Server-sent events, neither cached nor buffered by a proxy on the way."""
    response = StreamingHttpResponse(sse.failures_as_events(events), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response
