"""The web process as `make run`, compose and the tests start it: daphne on uvloop's event loop,
listening with room for a burst of new connections."""

import shutil
import subprocess

import httpx2
import pytest

from stack.daphne_uvloop import LISTEN_BACKLOG


def test_the_web_process_runs_daphne_on_uvloops_event_loop(probe_app_port):
    answer = httpx2.get(f"http://127.0.0.1:{probe_app_port}/api/_probe/loop", timeout=10)
    assert answer.json()["loop"].startswith("uvloop.")


@pytest.mark.skipif(shutil.which("ss") is None, reason="ss (iproute2) shows a listening socket's backlog")
def test_the_web_process_listens_with_room_for_a_burst_of_connections(probe_app_port):
    """A SYN past a full backlog is dropped and retried 1, 3, 7 s later (nginx opening a
    connection per answer when 500 start at once): the backlog must not be Twisted's 50."""
    listening = subprocess.run(["ss", "-Hltn", f"sport = :{probe_app_port}"], capture_output=True,
                               text=True, check=True).stdout.split()
    backlog = int(listening[2])  # State Recv-Q Send-Q ...: a listening socket's Send-Q is its backlog
    assert backlog == min(LISTEN_BACKLOG, int(open("/proc/sys/net/core/somaxconn").read()))
