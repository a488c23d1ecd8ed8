"""The API's door: what every JSON endpoint does around its view (chatapp/api.py, auth_api.py).

The method check, the session's user looked up on a database thread, the body read as JSON and
nothing else, and every refusal (an ApiError, a database that does not answer) as its JSON
answer with the right status; HEAD and OPTIONS as HTTP asks of every server.
"""

import functools
import logging

from django.contrib.auth import get_user
from django.db import InterfaceError, OperationalError
from django.http import HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase

from . import request_input
from .errors import ApiError, error_response
from .runtime.database_threads import on_database_thread

logger = logging.getLogger(__name__)

# A restart or a failover takes seconds: the page may try again after this many.
DATABASE_RETRY_AFTER_SECONDS = 5


def endpoint(*methods: str, login_required: bool = True):
    """A JSON view: it receives the request's user, looked up on a database thread."""

    def decorate(view):
        @functools.wraps(view)
        async def with_user(request, *args, **kwargs):
            user = await on_database_thread(user_of)(request, login_required)
            return await view(request, user, *args, **kwargs)

        return json_errors(methods, with_user)

    return decorate


def json_errors(methods: tuple[str, ...], view):
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
                response = error_response(error.status, error.code, error.message, error.details)
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
    media_type = request.content_type
    # A multipart body was parsed by the CSRF check and cannot be read again; any other body not
    # said to be JSON is refused rather than read as JSON regardless (`curl -d` sends a form).
    if media_type.startswith("multipart/") or (request.body and not _is_json(media_type)):
        raise ApiError(415, "unsupported_media_type",
                       f"the API reads a JSON body (Content-Type: application/json), not {media_type or 'an untyped one'}")
    return request_input.json_object(request.body)


def _is_json(media_type: str) -> bool:
    return media_type == "application/json" or (media_type.startswith("application/") and media_type.endswith("+json"))
