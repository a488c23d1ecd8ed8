"""A password change, wherever it is made (our API's POST /api/auth/password, the admin's change
password form, `manage.py changepassword`: any save of a user with a new password hash), ends the
streams of the user's other sessions at once, as a sign-out ends its own (session_ends.py).

Django's session auth hash is derived from the password hash, so a new hash is the change that
leaves every other session stale. A user's save is compared with the stored hash (pre_save: one
read, skipped by saves of other fields, such as a sign-in's last_login), and the user's group is
told once the new hash is committed: at once outside a request (a command, a shell, a task); at
the request's end within one (`tells_password_changes`, outside the session middleware), once the
session that made the change (Django's update_session_auth_hash) is stored under its new key
with the new hash. That message names the new key, so that the changing session's own streams
follow it rather than ending, the same message telling the user's other sessions; a staff member
who changed another user's password has their own session's group told its new key too.
"""

import asyncio
import contextvars
import functools

from django.conf import settings
from django.contrib.auth import SESSION_KEY, get_user_model
from django.db import transaction
from django.db.models.signals import post_save, pre_save
from django.dispatch import receiver
from django.utils.decorators import sync_and_async_middleware

from . import session_ends

# The users whose password the current request changed, told at its end; unset outside a request.
_changed_in_request: contextvars.ContextVar[set] = contextvars.ContextVar("password_changed_in_request")
_HASH_CHANGED = "_chatapp_password_hash_changed"  # set on the instance being saved, for post_save


@receiver(pre_save, sender=settings.AUTH_USER_MODEL, dispatch_uid="chatapp.password_changes.compared")
def _compare_hash(sender, instance, raw, using, update_fields, **kwargs) -> None:
    if raw or instance._state.adding or (update_fields is not None and "password" not in update_fields):
        return
    stored = sender._base_manager.using(using).filter(pk=instance.pk).values_list("password", flat=True).first()
    setattr(instance, _HASH_CHANGED, stored is not None and stored != instance.password)


@receiver(post_save, sender=settings.AUTH_USER_MODEL, dispatch_uid="chatapp.password_changes.saved")
def _tell_once_committed(sender, instance, created, using, **kwargs) -> None:
    if getattr(instance, _HASH_CHANGED, False):
        setattr(instance, _HASH_CHANGED, False)
        transaction.on_commit(functools.partial(_changed, instance.pk), using=using)


def _changed(user_id: int) -> None:
    in_request = _changed_in_request.get(None)
    if in_request is None:
        session_ends.tell_sessions_ended(user_id)
    else:
        in_request.add(user_id)


@sync_and_async_middleware
def tells_password_changes(get_response):
    """Tells the streams of every user whose password the request changed, once its response
    (and the session the session middleware stores) is ready."""
    if asyncio.iscoroutinefunction(get_response):
        async def middleware(request):
            changed, token, key_before = _request_starts(request)
            try:
                response = await get_response(request)
            finally:
                _changed_in_request.reset(token)
            _tell(request, changed, key_before)
            return response
    else:
        def middleware(request):
            changed, token, key_before = _request_starts(request)
            try:
                response = get_response(request)
            finally:
                _changed_in_request.reset(token)
            _tell(request, changed, key_before)
            return response
    return middleware


def _request_starts(request) -> tuple[set, contextvars.Token, str | None]:
    changed: set = set()
    return changed, _changed_in_request.set(changed), request.COOKIES.get(settings.SESSION_COOKIE_NAME)


def _tell(request, changed: set, key_before: str | None) -> None:
    if not changed:
        return
    session = getattr(request, "session", None)
    key_after = session.session_key if session is not None else None
    renamed = (key_before, key_after) if key_before and key_after and key_before != key_after else None
    told = set(changed)
    if renamed and (own := session.get(SESSION_KEY)) is not None:
        told.add(get_user_model()._meta.pk.to_python(own))  # its streams follow the new key too
    for user_id in told:
        session_ends.tell_sessions_ended(user_id, renamed=renamed)
