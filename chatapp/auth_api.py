"""The session's endpoints: the page's session and limits, sign-in, sign-out, and the signed-in
user's own password change. Views as chatapp/api.py's (api_door's `endpoint`: JSON errors, CSRF, the user)."""

from django.conf import settings
from django.contrib.auth import aauthenticate, alogin, alogout, authenticate, update_session_auth_hash
from django.core.exceptions import ValidationError
from django.http import JsonResponse
from django.views.decorators.csrf import ensure_csrf_cookie

from . import json_shapes, login_limit, request_input, services
from .api_door import body_of, endpoint
from .errors import ApiError
from .runtime.database_threads import on_database_thread


@ensure_csrf_cookie
@endpoint("GET", login_required=False)
async def session(request, user):
    # The limits too, signed in or not: the page shows them before it sends, not after a 400.
    return JsonResponse({"user": json_shapes.user_json(user),
                         "limits": {"max_message_chars": settings.CHAT_MAX_MESSAGE_CHARS,
                                    "max_title_chars": services.MAX_TITLE_CHARS}})


@endpoint("POST", login_required=False)
async def login(request, user):
    body = body_of(request)
    signed_in = await aauthenticate(request, username=request_input.text(body, "username", ""),
                                    password=request_input.text(body, "password", ""))
    if signed_in is None:
        raise _held_back(request) or ApiError(400, "invalid_credentials", "wrong username or password")
    await alogin(request, signed_in)
    return JsonResponse({"user": json_shapes.user_json(signed_in)})


def _held_back(request) -> ApiError | None:
    """The 429 of a password check the sign-in limit refused untried (chatapp/login_limit.py)."""
    wait = getattr(request, login_limit.REFUSED_FOR, 0)
    if not wait:
        return None
    return ApiError(429, "too_many_attempts", f"too many failed sign-ins: try again in {wait} s", retry_after_s=wait)


@endpoint("POST")
async def logout(request, user):
    """Signs this session out: its answer and watch streams stop, in every process (told by
    session_ends.py's receiver of the sign-out)."""
    await alogout(request)
    return JsonResponse({"user": None})


@endpoint("POST")
async def password(request, user):
    """The user's own password, changed: this session stays signed in, every other one ends, and
    so do their streams (told at the request's end: streaming/session_end_signals.py)."""
    body = body_of(request)
    old, new = request_input.text(body, "old_password"), request_input.text(body, "new_password")
    await on_database_thread(_password_change)(request, user, old, new)
    return JsonResponse({"user": json_shapes.user_json(user)})


def _password_change(request, user, old_password: str, new_password: str) -> None:
    # The current password is checked as a sign-in's is, so that a wrong one counts against the
    # same limit: a session left open is no way to guess the password without one.
    if authenticate(request, username=user.get_username(), password=old_password) != user:
        raise _held_back(request) or ApiError(400, "wrong_password", "old_password is not this account's password")
    try:
        services.user_password_change(user=user, new_password=new_password)
    except ValidationError as refused:
        raise ApiError(400, "invalid_password", " ".join(refused.messages), details=refused.messages) from None
    # Django keeps this session only for `request.user`, which it would read from the session
    # now, find its password hash stale and sign out: it is the user read before the change.
    request.user = user
    update_session_auth_hash(request, user)
    login_limit.device_known(request, user)  # this browser's device cookie names the new password
