"""Django's own middleware, with its hooks run on the event loop when the request is async.

Under ASGI, Django hands every hook of a sync middleware to the request's worker thread and
back (`sync_to_async`): some 0.2 ms apiece on a small machine, about a dozen per request, all in
front of an answer's first token. These hooks only read and write headers and cookies, so here
they run inline. The two that may reach the database, saving a changed session and storing
flash messages that were read or added, still go to the worker thread when they have to.
Sync requests (the test client, WSGI) take Django's own path unchanged.
"""

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.middleware import AuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.common import CommonMiddleware
from django.middleware.csrf import CsrfViewMiddleware
from django.middleware.security import SecurityMiddleware
from django.utils.deprecation import MiddlewareMixin


class _OnTheLoop:
    """For middleware whose process_request and process_response do no I/O."""

    def response_needs_thread(self, request) -> bool:
        return False

    async def __acall__(self, request):
        response = None
        if hasattr(self, "process_request"):
            response = self.process_request(request)
        response = response or await self.get_response(request)
        if hasattr(self, "process_response"):
            if self.response_needs_thread(request):
                return await sync_to_async(self.process_response, thread_sensitive=True)(
                    request, response)
            response = self.process_response(request, response)
        return response


class Security(_OnTheLoop, SecurityMiddleware):
    def process_response(self, request, response):
        """Over HTTPS (nginx's X-Forwarded-Proto, which it sets whatever the client sent) every
        cookie is Secure, CHAT_SECURE_COOKIES or not: the session cookie of a site behind TLS
        would otherwise go out again to any http:// address of it, readable on the way. Last
        of the responses' hooks, after every cookie is set (sign-in's device cookie too)."""
        response = super().process_response(request, response)
        if request.is_secure():
            for cookie in response.cookies.values():
                cookie["secure"] = True
        return response


class Session(_OnTheLoop, SessionMiddleware):
    def response_needs_thread(self, request) -> bool:
        session = getattr(request, "session", None)
        return session is not None and (session.modified or settings.SESSION_SAVE_EVERY_REQUEST)


class Common(_OnTheLoop, CommonMiddleware):
    def process_response(self, request, response):
        response = super().process_response(request, response)
        if response.status_code == 204:  # no content, no length to say (RFC 9110, 8.6)
            del response.headers["Content-Length"]
        return response


class Csrf(_OnTheLoop, CsrfViewMiddleware):
    # Django calls process_view itself; a coroutine is awaited on the loop in an async request
    # (and wrapped with async_to_sync in a sync one). The body it may read is already in memory.
    async def process_view(self, request, callback, callback_args, callback_kwargs):
        return super().process_view(request, callback, callback_args, callback_kwargs)


class Authentication(_OnTheLoop, AuthenticationMiddleware):
    pass  # sets lazy request.user / request.auser; the session is read later, by the view


class Messages(_OnTheLoop, MessageMiddleware):
    def response_needs_thread(self, request) -> bool:
        storage = getattr(request, "_messages", None)
        # Storing may read or write the session; untouched messages store nothing.
        return storage is not None and (storage.used or storage.added_new)


class XFrameOptions(_OnTheLoop, XFrameOptionsMiddleware):
    pass


class ContentSecurityPolicy(_OnTheLoop, MiddlewareMixin):
    """settings.CHAT_PAGES_POLICY on every answer that names no policy of its own (Django 5.2
    has no middleware of its own for it)."""

    def process_response(self, request, response):
        response.headers.setdefault("Content-Security-Policy", settings.CHAT_PAGES_POLICY)
        return response
