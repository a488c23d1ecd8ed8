"""Django's PostgreSQL backend, its tables emptied between transactional tests by DELETE.

pytest-django's `transactional_db` (every test that runs the async relay) empties the test
database after each test with Django's flush, which on PostgreSQL is one TRUNCATE of every
table: about 100 ms on this 2-core machine, since TRUNCATE gives each table and index a new
file, against 10 ms for deleting the few rows a test leaves. Over the 350-odd transactional
tests of `make check`, that was 35 s of its two workers. The rows go either way; sequences are
not reset by either (Django asks for that only with `reset_sequences`, which no test does, and
this falls back to TRUNCATE if one does). Django's foreign keys are DEFERRABLE INITIALLY
DEFERRED, and the flush runs in one transaction, so the order of the tables does not matter.

The content types and permissions that migrate made are kept: no test writes them, and the
flush's post_migrate would only write them all again (about 20 ms a test here: half the flush).
"""

from django.db import DatabaseError
from django.db.backends.postgresql import base, operations

# PostgreSQL's SQLSTATEs of a flush that met another session writing.
DEADLOCK_DETECTED = "40P01"
FOREIGN_KEY_VIOLATION = "23503"
FLUSH_TRIES = 3
# Django's own rows of its models, which post_migrate makes after every flush if they are gone.
KEPT_TABLES = frozenset({"django_content_type", "auth_permission"})


class DatabaseOperations(operations.DatabaseOperations):
    def execute_sql_flush(self, sql_list):
        """A stack's relay may still be writing its answer's rows as its test ends. DELETE locks
        rows one after another where TRUNCATE waited for whole tables: the relay may lock two of
        them in the other order, and PostgreSQL then ends one of the two transactions; or the
        relay adds a row pointing at one the flush deletes later, after the flush emptied the
        new row's table, and the flush's deferred foreign-key check refuses its commit. The
        flush, when it is the one refused, is made again (the other one has ended by then)."""
        for attempt in range(1, FLUSH_TRIES + 1):
            try:
                return super().execute_sql_flush(sql_list)
            except DatabaseError as error:
                met_a_writer = getattr(error.__cause__, "sqlstate", None) in (DEADLOCK_DETECTED, FOREIGN_KEY_VIOLATION)
                if attempt == FLUSH_TRIES or not met_a_writer:
                    raise

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences or allow_cascade:
            return super().sql_flush(style, tables, reset_sequences=reset_sequences,
                                     allow_cascade=allow_cascade)
        return [f"{style.SQL_KEYWORD('DELETE')} {style.SQL_KEYWORD('FROM')} "
                f"{style.SQL_FIELD(self.quote_name(table))};" for table in tables if table not in KEPT_TABLES]


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations
