"""The database work of the async views and the relay, on a few threads that keep their connections.

Under ASGI, Django runs a request's sync code (`sync_to_async`, thread-sensitive) on a thread
made for that request, so every request opens a database connection and drops it at the end:
on PostgreSQL a new session (TCP, authentication, milliseconds), on SQLite a new handle that
parses the whole schema again before its first query. An answer paid that twice before its
first token, and 500 answers starting together opened 500 connections. Here that work runs on a
fixed pool of threads, each keeping its own connection (Django's connections are per thread)
from one call to the next; a connection that failed and no longer answers is closed, and the
next call on that thread opens a fresh one. A connection lost on one thread usually means all
were (the server restarted, or an administrator ended the app's sessions): so after one is
found dead, every thread checks its own before its next use.

The call that finds its connection dead runs once more on a fresh one when everything it sent
was a read (SELECT): nothing it did can have been kept, so running it again is safe, and a lost
connection costs no request. A call that sent a write is not run again: the write may have been
committed before the connection died, and the caller decides (the relay's final save retries).
Django's CONN_HEALTH_CHECKS would ping the server in front of every call instead; a retry costs
nothing until a connection is lost.

Each call is one unit of work (a transaction starts and ends inside it): consecutive calls of
one request may run on different threads.
"""

import functools
import threading
from contextlib import ExitStack
from concurrent.futures import ThreadPoolExecutor, wait

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import InterfaceError, OperationalError, connections

_threads = settings.CHAT_DATABASE_THREADS
_pool = ThreadPoolExecutor(max_workers=_threads, thread_name_prefix="database")


class _Losses:
    """How many dead connections any thread has found, and how many each thread has checked for."""

    def __init__(self):
        self._lock = threading.Lock()
        self._count = 0
        self._checked = threading.local()

    def record(self) -> None:
        with self._lock:
            self._count += 1

    def unchecked(self) -> bool:
        """True once per thread after each loss it has not checked its own connections for."""
        count = self._count
        if getattr(self._checked, "count", 0) == count:
            return False
        self._checked.count = count
        return True


_losses = _Losses()


class _Statements:
    """Watches what a call sends (an execute wrapper): whether every statement so far was a read."""

    def __init__(self):
        self.are_reads = True

    def __call__(self, execute, sql, params, many, context):
        if str(sql).lstrip()[:6].upper() != "SELECT":
            self.are_reads = False
        return execute(sql, params, many, context)

    def run(self, function, args, kwargs):
        with ExitStack() as watching:
            for connection in connections.all():
                watching.enter_context(connection.execute_wrapper(self))
            return function(*args, **kwargs)


def on_database_thread(function):
    """`function` as a coroutine function that runs it on one of the database threads."""

    @functools.wraps(function)
    def call(*args, **kwargs):
        if _losses.unchecked():
            close_dead_connections()
        statements = _Statements()
        try:
            return statements.run(function, args, kwargs)
        except (OperationalError, InterfaceError):
            if not (statements.are_reads and close_broken_connections()):
                raise
            return function(*args, **kwargs)  # on the fresh connection it opens
        finally:
            close_broken_connections()

    return sync_to_async(call, thread_sensitive=False, executor=_pool)


def close_broken_connections() -> bool:
    """After a call: a connection that failed and no longer answers is closed, to be reopened.
    True when one was."""
    lost = False
    for connection in connections.all(initialized_only=True):
        if connection.in_atomic_block:
            connection.close()  # cannot happen through atomic(); never hand a transaction on
        elif connection.errors_occurred:
            if connection.is_usable():
                connection.errors_occurred = False
            else:
                connection.close()
                _losses.record()
                lost = True
    return lost


def close_dead_connections() -> None:
    """Before a call, after another thread lost its connection: this thread's open ones that
    no longer answer are closed, so the call opens a fresh one instead of failing."""
    for connection in connections.all(initialized_only=True):
        if connection.connection is not None and not connection.is_usable():
            connection.close()


def close_connections(timeout: float = 30) -> None:
    """Closes the connections of every database thread (a test database is dropped after this).

    A connection is closed by its own thread: one task per thread, each held at a barrier until
    all the threads have one, so that no thread takes two.
    """
    barrier = threading.Barrier(_threads)

    def close_own():
        barrier.wait(timeout)
        connections.close_all()

    for done in wait([_pool.submit(close_own) for _ in range(_threads)], timeout).done:
        done.result()
