"""`make run` says it is ready once every health check answers 200, says once what it still
waits for when that takes long, and says nothing after it was stopped. A health check served in
this process (uvicorn on a thread); the whole stack's version is in tests/test_stack.py."""

import json
import threading
from contextlib import contextmanager

from harness import ports, waiting
from stack.readiness import Announcer, Check, healthy
from tests.servers import answering, uvicorn_in_thread


@contextmanager
def health_check(statuses: list[int], body: dict | None = None):
    """A /health that answers each of `statuses` in turn, then the last one for good."""
    with uvicorn_in_thread(answering(statuses, body=json.dumps(body).encode() if body else b"")) as base:
        yield f"{base}/health"


def test_ready_is_said_once_every_check_answers_200_and_not_while_one_says_loading():
    said = []
    with health_check([200]) as app, health_check([503, 503, 200]) as model:
        checks = (Check("the app", app), Check("the model", model))
        announcer = Announcer(checks, said.append, "ready")
        announcer.start()
        waiting.wait_until(lambda: said, 10, "a line")
        announcer.stop()

    assert said == ["ready"]


def test_a_check_still_failing_after_the_limit_is_named_once_and_ready_never_said():
    said = []
    refused = f"http://127.0.0.1:{ports.free_port()}/health"
    with health_check([200]) as app:
        announcer = Announcer((Check("the app", app), Check("the inference service", refused)),
                              said.append, "ready", late_s=0)
        announcer.start()
        waiting.wait_until(lambda: said, 10, "a line")
        announcer.stop()

    assert len(said) == 1
    assert "still starting" in said[0] and f"the inference service ({refused})" in said[0]
    assert "the app" not in said[0]


def test_a_service_that_says_why_it_cannot_become_ready_is_quoted_at_once_and_again_once_late():
    """The inference service whose model failed to load (a device it lacks) answers 503 with its
    error for good: `make run` had said nothing of it, and after 120 s only what it waited for."""
    said = []
    failed = {"status": "unhealthy", "error": "loading the model failed: ValueError('no CUDA device')"}
    with health_check([200]) as app, health_check([503], failed) as model:
        announcer = Announcer((Check("the app", app), Check("the inference service", model)),
                              said.append, "ready", late_s=0.5)
        announcer.start()
        waiting.wait_until(lambda: len(said) == 2, 10, "two lines")
        announcer.stop()

    assert said[0] == f"chatapp: the inference service is not ready: {failed['error']} ({model})"
    assert "still starting" in said[1] and f"the inference service ({model}: {failed['error']})" in said[1]


def test_a_stopped_announcer_says_nothing_even_once_its_checks_answer():
    said = []
    with health_check([200]) as app:
        announcer = Announcer((Check("the app", app),), said.append, "ready")
        announcer.stop()
        announcer.start()
        thread = [t for t in threading.enumerate() if t.name == "readiness"]
        for running in thread:
            running.join(timeout=10)

    assert said == []


def test_a_proxy_the_environment_names_is_not_asked_for_the_stacks_own_addresses(monkeypatch):
    """`make run` in a shell behind a proxy: the proxy cannot reach this machine's loopback."""
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{ports.free_port()}")
    with health_check([200]) as app:
        assert healthy(app)
