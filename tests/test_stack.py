"""`make run`'s supervisor brings up what exists and stops every child on Ctrl-C or SIGTERM."""

import os
import signal
import socket
import sys

import httpx
import pytest

from tests import servers


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_the_stack_serves_the_app_through_nginx_and_stops_cleanly_on_ctrl_c_or_sigterm(
        nginx_binary, tmp_path, stop_signal):
    public_port, daphne_port, inference_port = servers.free_port(), servers.free_port(), servers.free_port()
    env = {
        "INFERENCE_PORT": str(inference_port),
        "INFERENCE_URL": f"http://127.0.0.1:{inference_port}",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'stack.sqlite3'}",
        "CHATAPP_PORT": str(public_port),
        "CHATAPP_DAPHNE_PORT": str(daphne_port),
        "DJANGO_ADMIN_PASSWORD": "a-long-test-password",
    }
    base = f"http://127.0.0.1:{public_port}"

    with servers.running([sys.executable, "-m", "stack"], env=env, ready_url=f"{base}/healthz",
                         timeout_s=120, stop_signal=stop_signal) as stack:
        health = httpx.get(f"{base}/healthz")
        login_page = httpx.get(f"{base}/admin/login/")
        stylesheet = httpx.get(f"{base}/static/admin/css/base.css")
        front_page = httpx.get(f"{base}/")
        assert listening(daphne_port)

        stack.send_signal(stop_signal)
        status = stack.wait(timeout=30)
        output = servers.output_of(stack)

    assert health.json() == {"status": "ok"}
    assert health.headers["server"] == "nginx"
    assert login_page.status_code == 200
    assert stylesheet.status_code == 200 and "text/css" in stylesheet.headers["content-type"]
    assert front_page.status_code == 200 and "<html" in front_page.text
    assert "Created admin account 'admin'" in output
    assert "web started" in output and "nginx started" in output
    if os.environ.get("REDIS_URL"):
        assert "worker started" in output and "worker stopped" in output
    else:
        assert "reaper started" in output and "reaper stopped" in output
    assert status == 0, output
    assert not listening(public_port)
    assert not listening(daphne_port)
