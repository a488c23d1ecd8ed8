"""The web process as `make run`, compose and the tests start it: daphne with uvloop's loop."""

import httpx


def test_the_web_process_runs_daphne_on_uvloops_event_loop(probe_app_port):
    answer = httpx.get(f"http://127.0.0.1:{probe_app_port}/api/_probe/loop", timeout=10)
    assert answer.json()["loop"].startswith("uvloop.")
