"""The outage an administrator makes (harness/database_administrator.py) is the servers': the
sessions it ends are the app's, in its web processes, never this test process's own. One it
ended was left dead on a thread no test closes (asgiref's, where async tests reach the database),
and every later test of that worker failed with "the connection is closed" (CI, 2026-12-07)."""

import subprocess
import sys
import threading

import pytest
from django.db import connection, connections

from harness import waiting
from harness.database_administrator import DatabaseAdministrator
from tests import servers

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's sessions")]

# Another process's session (a web process's), open until its input closes.
HOLDS_A_SESSION = ("import sys, psycopg; session = psycopg.connect(sys.argv[1]);"
                   " print(session.info.backend_pid, flush=True); sys.stdin.read()")


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def running(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
        return cursor.fetchone()[0] == 1


class ThreadWithASession(threading.Thread):
    """A thread that opens its own connection, then reads its backend again when asked."""

    def __init__(self):
        super().__init__()
        self.pids, self.asked = [], threading.Event()

    def run(self):
        try:
            self.pids.append(backend_pid())
            self.asked.wait(30)
            self.pids.append(backend_pid())
        finally:
            connections.close_all()


def test_ending_the_databases_sessions_ends_the_other_processes_and_not_this_ones():
    thread = ThreadWithASession()
    thread.start()
    waiting.wait_until(lambda: thread.pids, 10, "the thread's session")
    own = backend_pid()
    with subprocess.Popen([sys.executable, "-c", HOLDS_A_SESSION, servers.shared_database_url()],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as other:
        others = int(other.stdout.readline())
        with DatabaseAdministrator(servers.shared_database_url()) as administrator:
            administrator.end_sessions()
        waiting.wait_until(lambda: not running(others), 10, "the other process's session ended")
        thread.asked.set()
        thread.join(30)
        other.stdin.close()

    assert backend_pid() == own
    assert thread.pids[1] == thread.pids[0] != own
