"""A session's end, wherever it is made, told to the user's streams (session_ends.py): a sign-out
(ours, POST /api/auth/logout, or the admin's: Django's user_logged_out), and a password change
(our API's POST /api/auth/password, the admin's change password form, `manage.py
changepassword`: any save of a user with a new password hash), which leaves every other session
of the user stale.

Django's session auth hash is derived from the password hash, so a new hash is the change that
leaves every other session stale. A user's save is compared with the stored hash (pre_save: one
read, skipped by saves of other fields, such as a sign-in's last_login), and the user's group is
told once the new hash is committed. Either end is told at once outside a request (a command, a
shell, a task), and at the request's end within one (`tells_session_ends`, outside the session
middleware): a sign-out's signal comes before its session is deleted, which a hub reading the
sessions at once would still find; and a password change's session (Django's
update_session_auth_hash) is then stored under its new key with the new hash. That message names
the new key, so that the changing session's own streams follow it rather than ending, the same
message telling the user's other sessions; a staff member who changed another user's password
has their own session's group told its new key too.
"""

import asyncio
import contextvars
import functools

from django.conf import settings
from django.contrib.auth import SESSION_KEY, get_user_model
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.db.models.signals import post_save, pre_save
from django.dispatch import receiver
from django.utils.decorators import sync_and_async_middleware

from . import session_ends

# The users whose session the current request ended, told at its end; unset outside a request.
_ended_in_request: contextvars.ContextVar[set] = contextvars.ContextVar("sessions_ended_in_request")
_HASH_CHANGED = "_chatapp_password_hash_changed"  # set on the instance being saved, for post_save


@receiver(pre_save, sender=settings.AUTH_USER_MODEL, dispatch_uid="chatapp.session_end_signals.compared")
def _compare_hash(sender, instance, raw, using, update_fields, **kwargs) -> None:
    if raw or instance._state.adding or (update_fields is not None and "password" not in update_fields):
        return
    stored = sender._base_manager.using(using).filter(pk=instance.pk).values_list("password", flat=True).first()
    setattr(instance, _HASH_CHANGED, stored is not None and stored != instance.password)


@receiver(post_save, sender=settings.AUTH_USER_MODEL, dispatch_uid="chatapp.session_end_signals.saved")
def _tell_once_committed(sender, instance, created, using, **kwargs) -> None:
    if getattr(instance, _HASH_CHANGED, False):
        setattr(instance, _HASH_CHANGED, False)
        transaction.on_commit(functools.partial(_ended, instance.pk), using=using)


@receiver(user_logged_out, dispatch_uid="chatapp.session_end_signals.signed_out")
def _signed_out(sender, request, user, **kwargs) -> None:
    if user is not None:  # None: nobody was signed in
        _ended(user.pk)


def _ended(user_id: int) -> None:
    in_request = _ended_in_request.get(None)
    if in_request is None:
        session_ends.tell_sessions_ended(user_id)
    else:
        in_request.add(user_id)


@sync_and_async_middleware
def tells_session_ends(get_response):
    """Tells the streams of every user whose session the request ended (a sign-out, a password
    change), once its response (and the session the session middleware stores) is ready."""
    if asyncio.iscoroutinefunction(get_response):
        async def middleware(request):
            ended, token, key_before = _request_starts(request)
            try:
                response = await get_response(request)
            finally:
                _ended_in_request.reset(token)
            _tell(request, ended, key_before)
            return response
    else:
        def middleware(request):
            ended, token, key_before = _request_starts(request)
            try:
                response = get_response(request)
            finally:
                _ended_in_request.reset(token)
            _tell(request, ended, key_before)
            return response
    return middleware


def _request_starts(request) -> tuple[set, contextvars.Token, str | None]:
    ended: set = set()
    return ended, _ended_in_request.set(ended), request.COOKIES.get(settings.SESSION_COOKIE_NAME)


def _tell(request, ended: set, key_before: str | None) -> None:
    if not ended:
        return
    session = getattr(request, "session", None)
    key_after = session.session_key if session is not None else None
    renamed = (key_before, key_after) if key_before and key_after and key_before != key_after else None
    told = set(ended)
    if renamed and (own := session.get(SESSION_KEY)) is not None:
        told.add(get_user_model()._meta.pk.to_python(own))  # its streams follow the new key too
    for user_id in told:
        session_ends.tell_sessions_ended(user_id, renamed=renamed)
