"""Failed sign-ins, counted where Django authenticates so that every way in (the API, /admin/login/)
shares one count, in Django's cache (Redis when REDIS_URL is set, so every daphne process sees it).

Two rules, after django-axes' lockout parameters and OWASP's authentication guidance:
- one account from one address (the pair): after CHAT_LOGIN_ATTEMPTS failures in a window of
  CHAT_LOGIN_WINDOW_SECONDS that pair is refused until the window ends. A stranger guessing
  passwords elsewhere locks nobody out of their own address.
- one account from anywhere, or one address for any account (spraying): after
  CHAT_LOGIN_SPREAD_ATTEMPTS failures each further one makes it wait, 1 s doubling up to the
  window. A delay slows a guesser without handing anyone a switch that locks an account: a
  browser that signed in to the account before holds a signed cookie saying so (OWASP's device
  cookies, `DEVICE_COOKIE`), and the account's delay does not hold it back, so that a guesser
  spread over many addresses slows new devices, never its owner's own browser. The cookie
  vouches for the account's password of its sign-in: once the password changes, every browser
  but the one that changed it (which gets a new cookie) is a new device again, so that one that
  signed in with a stolen password keeps no exemption.
A known browser is held to neither address rule either: it is a pair with the account by
itself, wherever it is, refused for the window after CHAT_LOGIN_ATTEMPTS failures of its own.
Many people may share an address (a NAT, a proxy or load balancer in front of nginx), and any of
them could otherwise keep the owner out, their own browser too, with a few wrong passwords every
window.
Only failures count: a check in flight is none, and a refused attempt neither counts nor moves a
window. Our own rather than django-axes (README, "Sign-in limit"): axes has one failure limit for
every parameter set, no delay, and fails the sign-in when its cache is down.
"""

import asyncio
import functools
import hashlib
import logging
import math
import time

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.core import signing
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.dispatch import receiver
from django.utils.crypto import salted_hmac
from django.utils.decorators import sync_and_async_middleware

logger = logging.getLogger(__name__)

# Set on the request when the limit refused it: the view and the admin's form read it.
REFUSED_FOR = "sign_in_refused_for_seconds"
# Set on the request that signed in: its response gives the browser the account's device cookie.
_SIGNED_IN_DEVICE = "signed_in_device"
DEVICE_COOKIE = "chatapp_device"
_DEVICE_SALT = "chatapp.login_limit.device"
_DEVICE_COOKIE_AGE_S = 365 * 24 * 3600


class SignInRefused(PermissionDenied):
    """Raised by the backend: Django's authenticate() stops at it and tries no other backend."""


def _open_when_the_cache_fails(default):
    """Without its cache (Redis down) the limit lets sign-ins through rather than refusing
    everyone: the passwords are still checked, only the counting pauses."""

    def decorate(function):
        @functools.wraps(function)
        def guarded(*args, **kwargs):
            try:
                return function(*args, **kwargs)
            except Exception:
                logger.exception("the sign-in limit could not reach its cache; not counting")
                return default

        return guarded

    return decorate


def client_address(request) -> str:
    # nginx sets X-Real-IP to the peer it saw, replacing whatever the client sent; without
    # nginx in front the peer is the client itself.
    if request is None:
        return ""
    return request.headers.get("X-Real-IP") or request.META.get("REMOTE_ADDR", "")


def _account(username: str) -> str:
    # Hashed: a username may hold any character, and a cache key may not.
    return hashlib.sha256(username.casefold().encode()).hexdigest()


def _keys(username: str, address: str, device: str | None = None) -> dict[str, str]:
    """The counts a sign-in is held to; from a known `device` its pair is the account and it."""
    account = _account(username)
    pair = f"login-failures:device:{account}:{device}" if device else f"login-failures:pair:{account}:{address}"
    return {"pair": pair, "account": f"login-failures:account:{account}", "address": f"login-failures:address:{address}"}


def spread_delay(failures: int) -> int:
    """Seconds an account or address waits after its latest failure, once past the spread limit."""
    beyond = failures - settings.CHAT_LOGIN_SPREAD_ATTEMPTS
    if beyond < 0:
        return 0
    window = settings.CHAT_LOGIN_WINDOW_SECONDS
    return window if beyond >= window.bit_length() else min(window, 2**beyond)


@_open_when_the_cache_fails(0)
def seconds_to_wait(username: str, address: str, device: str | None = None) -> int:
    """0 when this account may try from this address now, else the seconds until it may; from a
    known `device` (device_of) only its own pair's lock is waited for."""
    keys = _keys(username, address, device)
    names = [name for key in keys.values() for name in (key, f"{key}:since", f"{key}:last")]
    stored = cache.get_many(names)
    now, waits = time.time(), [0.0]
    pair = keys["pair"]
    if stored.get(pair, 0) >= settings.CHAT_LOGIN_ATTEMPTS:
        waits.append(stored.get(f"{pair}:since", now) + settings.CHAT_LOGIN_WINDOW_SECONDS - now)
    for key in () if device else (keys["account"], keys["address"]):
        waits.append(stored.get(f"{key}:last", now) + spread_delay(stored.get(key, 0)) - now)
    return max(0, math.ceil(max(waits)))


@_open_when_the_cache_fails(None)
def count_failure(username: str, address: str, device: str | None = None) -> None:
    now, window = time.time(), settings.CHAT_LOGIN_WINDOW_SECONDS
    for key in _keys(username, address, device).values():
        # The window starts at the first failure and the count ends with it. The cache's incr is
        # Redis' own INCR, so parallel failures each count one.
        if cache.add(key, 0, window):
            cache.set(f"{key}:since", now, window)
        try:
            cache.incr(key)
        except ValueError:  # the window ended between add and incr
            cache.add(key, 1, window)
        cache.set(f"{key}:last", now, window)


def _device(user) -> dict:
    """What a device cookie vouches for: the account, and (a keyed digest of) its password hash."""
    return {"account": _account(user.get_username()),
            "password": salted_hmac(_DEVICE_SALT, user.password, algorithm="sha256").hexdigest()}


def device_of(request, username: str) -> str | None:
    """The browser, when it signed in to this account before (within a year) with its password
    of now: a digest of the device cookie that sign-in (or the password's change) gave it; else
    None. Reads the account's user (a signed cookie costs a query, a missing one nothing)."""
    token = request.COOKIES.get(DEVICE_COOKIE) if request is not None else None
    if not token:
        return None
    try:
        vouched = signing.loads(token, salt=_DEVICE_SALT, max_age=_DEVICE_COOKIE_AGE_S)
    except signing.BadSignature:
        return None
    if not isinstance(vouched, dict) or vouched.get("account") != _account(username):
        return None  # another account's, or one from before cookies named the password
    try:
        user = get_user_model()._default_manager.get_by_natural_key(username)
    except get_user_model().DoesNotExist:
        return None
    return hashlib.sha256(token.encode()).hexdigest() if vouched == _device(user) else None


@receiver(user_logged_in, dispatch_uid="chatapp.login_limit.device")
def signed_in(sender, request, user, **kwargs):
    device_known(request, user)


def device_known(request, user) -> None:
    """The browser of `request` signed in to `user`'s account, or changed its password: its
    response gives it the cookie that says so."""
    if request is not None:
        setattr(request, _SIGNED_IN_DEVICE, _device(user))


def _give_device_cookie(request, response) -> None:
    device = getattr(request, _SIGNED_IN_DEVICE, None)
    if device:
        response.set_cookie(DEVICE_COOKIE, signing.dumps(device, salt=_DEVICE_SALT),
                            max_age=_DEVICE_COOKIE_AGE_S, httponly=True, samesite="Lax",
                            secure=settings.SESSION_COOKIE_SECURE)


@sync_and_async_middleware
def known_device(get_response):
    """Gives a browser that has just signed in (the API or the admin) the account's device cookie;
    on the event loop in an async request (no I/O)."""
    if asyncio.iscoroutinefunction(get_response):
        async def middleware(request):
            response = await get_response(request)
            _give_device_cookie(request, response)
            return response
    else:
        def middleware(request):
            response = get_response(request)
            _give_device_cookie(request, response)
            return response
    return middleware


def _refuse_if_held_back(request, username) -> None:
    username = username or ""
    wait = seconds_to_wait(username, client_address(request), device_of(request, username))
    if wait:
        if request is not None:
            setattr(request, REFUSED_FOR, wait)
        raise SignInRefused(f"too many failed sign-ins: try again in {wait} s")


class SignInLimit(ModelBackend):
    """Django's own backend, asked only once the limit lets a sign-in through: a refused one has
    no password checked. One backend rather than a gate in front of ModelBackend, so that a
    session names it and force_login needs no backend argument."""

    def authenticate(self, request, username=None, password=None, **credentials):
        _refuse_if_held_back(request, username)
        return super().authenticate(request, username, password, **credentials)

    async def aauthenticate(self, request, username=None, password=None, **credentials):
        await sync_to_async(_refuse_if_held_back)(request, username)
        return await super().aauthenticate(request, username, password, **credentials)


@receiver(user_login_failed, dispatch_uid="chatapp.login_limit")
def failed(sender, credentials, request=None, **kwargs):
    if getattr(request, REFUSED_FOR, 0):
        return  # refused, not tried: counting it would extend the lock for as long as someone knocks
    username = credentials.get("username") or ""
    count_failure(username, client_address(request), device_of(request, username))
