"""The test database as an outage leaves it, on the real PostgreSQL: the app's sessions ended (a
restart, an administrator), and new ones refused (a server down or restarting)."""

import contextlib

from django.db import connection

from harness.database_administrator import DatabaseAdministrator
from tests import servers


def terminate_the_database_threads_backends() -> int:
    """The sessions the app's database threads opened (the test's own connections stay)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                       " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                       " AND backend_start > (SELECT backend_start FROM pg_stat_activity"
                       "                      WHERE pid = pg_backend_pid())")
        return len(cursor.fetchall())


@contextlib.contextmanager
def database_refusing_new_sessions():
    """The test database refuses every new session, as a server that is down or restarting does,
    until the block ends; the sessions open already (the test's own) go on."""
    with DatabaseAdministrator(servers.shared_database_url()) as administrator:
        administrator.refuse_sessions()
        yield
