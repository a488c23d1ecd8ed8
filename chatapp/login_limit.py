"""Failed sign-ins counted per account and per client address, in Django's cache (Redis when
REDIS_URL is set, so every daphne process shares the counts): beyond CHAT_LOGIN_ATTEMPTS in a
window of CHAT_LOGIN_WINDOW_SECONDS, login is refused until the window ends."""

import functools
import hashlib
import logging
import math
import time

from django.conf import settings
from django.core.cache import cache

logger = logging.getLogger(__name__)


def _open_when_the_cache_fails(default):
    """Without its cache (Redis down) the limit lets sign-ins through rather than refusing
    everyone: the passwords are still checked, only the counting pauses."""

    def decorate(function):
        @functools.wraps(function)
        async def guarded(*args, **kwargs):
            try:
                return await function(*args, **kwargs)
            except Exception:
                logger.exception("the login limit could not reach its cache; not counting")
                return default

        return guarded

    return decorate


def _keys(username: str, address: str) -> list[str]:
    # Hashed: a username may hold any character, and a cache key may not.
    account = hashlib.sha256(username.casefold().encode()).hexdigest()
    return [f"login-failures:account:{account}", f"login-failures:address:{address}"]


def client_address(request) -> str:
    # nginx sets X-Real-IP to the peer it saw, replacing whatever the client sent; without
    # nginx in front the peer is the client itself.
    return request.headers.get("X-Real-IP") or request.META.get("REMOTE_ADDR", "")


@_open_when_the_cache_fails(0)
async def seconds_to_wait(username: str, address: str) -> int:
    """0 when a sign-in may be tried now; else how long until the fullest window ends."""
    waits = []
    for key in _keys(username, address):
        failures = await cache.aget(key, 0)
        if failures >= settings.CHAT_LOGIN_ATTEMPTS:
            waits.append(math.ceil(await cache.aget(f"{key}:until", time.time()) - time.time()))
    return max([1, *waits]) if waits else 0


@_open_when_the_cache_fails(None)
async def record_failure(username: str, address: str) -> None:
    window = settings.CHAT_LOGIN_WINDOW_SECONDS
    for key in _keys(username, address):
        # The window starts at the first failure and the count ends with it.
        if await cache.aadd(key, 0, window):
            await cache.aset(f"{key}:until", time.time() + window, window)
        try:
            await cache.aincr(key)
        except ValueError:  # the window ended between add and incr
            await cache.aadd(key, 1, window)
