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

# PostgreSQL's SQLSTATE of a flush that met another session writing.
DEADLOCK_DETECTED = "40P01"
FLUSH_TRIES = 3
# Django's own rows of its models, which post_migrate makes after every flush if they are gone.
KEPT_TABLES = frozenset({"django_content_type", "auth_permission"})


class DatabaseOperations(operations.DatabaseOperations):
    def execute_sql_flush(self, sql_list):
        """A stack's relay may still be writing its answer's rows as its test ends. The flush
        first takes every table as TRUNCATE did (EXCLUSIVE: reads go on, writes wait), so that no
        row can be added between its deletes: without that, a writer's row pointing at one the
        flush deleted later failed the flush's deferred foreign-key check at its commit, and the
        writer's own commit, still on its way when the flush began again, could fail the next try
        the same way (three tries were not enough on a loaded AVX2 machine). A writer holding one
        table and asking for another that the flush holds ends one of the two transactions
        (PostgreSQL's deadlock check); the flush, when it is the one ended, is made again, and its
        lock waits for that writer's whole transaction."""
        for attempt in range(1, FLUSH_TRIES + 1):
            try:
                return super().execute_sql_flush(sql_list)
            except DatabaseError as error:
                met_a_writer = getattr(error.__cause__, "sqlstate", None) == DEADLOCK_DETECTED
                if attempt == FLUSH_TRIES or not met_a_writer:
                    raise

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences or allow_cascade:
            return super().sql_flush(style, tables, reset_sequences=reset_sequences,
                                     allow_cascade=allow_cascade)
        emptied = [style.SQL_FIELD(self.quote_name(table)) for table in tables if table not in KEPT_TABLES]
        if not emptied:
            return []
        lock = f"{style.SQL_KEYWORD('LOCK TABLE')} {', '.join(emptied)} {style.SQL_KEYWORD('IN EXCLUSIVE MODE')};"
        delete = f"{style.SQL_KEYWORD('DELETE')} {style.SQL_KEYWORD('FROM')}"
        return [lock, *(f"{delete} {table};" for table in emptied)]


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations
