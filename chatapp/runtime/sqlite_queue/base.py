"""SQLite whose writers queue in Python, one lock per database file, instead of in SQLite.

Every transaction here begins IMMEDIATE (it takes the file's write lock at once). Left to SQLite,
a thread that finds the lock taken sleeps in growing steps (up to 100 ms) and tries again, so a
burst of answer starts, each holding the lock for a few milliseconds, leaves the lock idle
between a commit and the next waiter's retry and drags on until some time out with "database is
locked". Threads of one process wait on a Python lock instead and go the moment it is free; other
processes on the same file (a Celery worker) still meet SQLite's own busy timeout.

Its LIKE matches as PostgreSQL's ILIKE does, case folded in every script (unicode_like.py).
"""

import contextlib
import threading

from django.db import OperationalError
from django.db.backends.sqlite3 import base

from . import unicode_like

_writers: dict[str, threading.Lock] = {}
_writers_guard = threading.Lock()


def _writer_lock(name: str) -> threading.Lock:
    with _writers_guard:
        return _writers.setdefault(str(name), threading.Lock())


class DatabaseWrapper(base.DatabaseWrapper):
    _held_writer_lock = None  # this file's writer lock, while a transaction of ours holds it

    def get_new_connection(self, conn_params):
        connection = super().get_new_connection(conn_params)
        for arguments in (2, 3):  # LIKE, and LIKE ... ESCAPE
            connection.create_function("like", arguments, unicode_like.matches, deterministic=True)
        return connection

    def _start_transaction_under_autocommit(self):
        lock = _writer_lock(self.settings_dict["NAME"])
        # As long as SQLite itself would wait, then the same error: a deadlock cannot hang us.
        if not lock.acquire(timeout=self.settings_dict["OPTIONS"].get("timeout", 5)):
            raise OperationalError("database is locked (waited for this process's other writers)")
        self._held_writer_lock = lock
        try:
            super()._start_transaction_under_autocommit()
        except BaseException:
            self._release_writer_lock()
            raise

    def _commit(self):
        with self._then_release_writer_lock():
            return super()._commit()

    def _rollback(self):
        with self._then_release_writer_lock():
            return super()._rollback()

    def _close(self):
        with self._then_release_writer_lock():
            return super()._close()

    @contextlib.contextmanager
    def _then_release_writer_lock(self):
        try:
            yield
        finally:
            self._release_writer_lock()

    def _release_writer_lock(self):
        lock, self._held_writer_lock = self._held_writer_lock, None
        if lock is not None:
            lock.release()
