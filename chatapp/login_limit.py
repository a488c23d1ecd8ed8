"""Sign-in attempts counted per account and per client address, in Django's cache (Redis when
REDIS_URL is set, so every daphne process shares the counts): beyond CHAT_LOGIN_ATTEMPTS in a
window of CHAT_LOGIN_WINDOW_SECONDS, login is refused until the window ends."""

import functools
import hashlib
import logging
import math
import time

from asgiref.sync import sync_to_async
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
async def reserve_attempt(username: str, address: str) -> int:
    """Counts this sign-in before its password is checked; 0 when it may go on, else the seconds
    until the fullest window ends.

    Counted first, with the cache's atomic increment, so that a burst of parallel attempts
    cannot all read a count under the limit before any failure is recorded.
    """
    window = settings.CHAT_LOGIN_WINDOW_SECONDS
    waits = []
    for key in _keys(username, address):
        # The window starts at the first attempt and the count ends with it.
        if await cache.aadd(key, 0, window):
            await cache.aset(f"{key}:until", time.time() + window, window)
        try:
            # The sync incr: Redis' own INCR. Django's aincr reads and writes back, so parallel
            # attempts would each count one.
            attempts = await sync_to_async(cache.incr)(key)
        except ValueError:  # the window ended between add and incr
            await cache.aadd(key, 1, window)
            attempts = 1
        if attempts > settings.CHAT_LOGIN_ATTEMPTS:
            waits.append(math.ceil(await cache.aget(f"{key}:until", time.time()) - time.time()))
    return max([1, *waits]) if waits else 0


@_open_when_the_cache_fails(None)
async def forgive_attempt(username: str, address: str) -> None:
    """A sign-in that succeeded was no failure: its count is given back."""
    for key in _keys(username, address):
        try:
            await sync_to_async(cache.decr)(key)
        except ValueError:  # its window ended meanwhile
            pass
