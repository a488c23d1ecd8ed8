"""Django's ASGI handler without a thread started for every request.

Django enters a fresh `ThreadSensitiveContext` per request, so the first thread-sensitive
`sync_to_async` of each request starts a new thread (and the loop blocks in `Thread.start`
until that thread runs, many milliseconds when the database threads hold the GIL). Here the
only such calls are Django's own request signals (`reset_queries`, `close_old_connections`)
and the sync views (the admin): the API's database work runs on the database threads
(chatapp/runtime/database_threads.py). py-spy put the thread's start and end at 15% of daphne's loop
with 500 answers starting, and each start held the loop for as long as it waited.

Without the per-request context, that thread-sensitive work runs on asgiref's one shared
thread, as a WSGI worker thread would: the sync views take turns on it, and the connections
they open there are opened and closed by the request signals that run on the same thread,
so nothing about connections changes.
"""

import django
from django.core.handlers.asgi import ASGIHandler


class SharedThreadASGIHandler(ASGIHandler):
    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        await self.handle(scope, receive, send)


def application() -> SharedThreadASGIHandler:
    """What django.core.asgi.get_asgi_application() gives, with the handler above."""
    django.setup(set_prefix=False)
    return SharedThreadASGIHandler()
