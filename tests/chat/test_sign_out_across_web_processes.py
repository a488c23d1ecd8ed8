"""A session that ends (a sign-out, or a password change in another browser) ends its streams, in
whichever web process holds them: two daphne processes on one Redis channel layer and database,
behind nginx as `make run` starts them (the fixture of test_stop_across_web_processes.py).

The answer belongs to the user, not to a session: a watch stream of a session that ended stops,
and the answer goes on for the user's other sessions. The session that asked an answer ending
stops that answer (the user signed out on purpose), recorded as cancelled by `signed_out`.
"""

import os
from contextlib import contextmanager

import httpx2
import pytest

from chatapp.models import Generation
from common.sse import SSEParser
from tests.chat.streams import shown
from tests.chat.test_stop_across_web_processes import CHUNKS, events_of, two_web_processes  # noqa: F401

pytestmark = [
    pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("small_login_limits"),
    pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="processes share a channel layer only on Redis"),
]

NEW_PASSWORD = "another-long-passphrase"


def signed_out_event(events) -> bool:
    name, payload = events[-1]
    return name == "error" and payload["code"] == "signed_out"


@contextmanager
def asked_on_one_watched_by_another_session_on_the_other(two_web_processes, user, conversation, upstream):
    """An answer of CHUNKS, 100 ms apart, asked by one browser of `user` on the first process and
    watched by another browser of `user` on the second, both streams open and started:
    (the generation id, the asker, the asker's events, the watcher's events)."""
    upstream.script.chunks = CHUNKS
    upstream.script.interval_s = 0.1
    first, second = two_web_processes.process_urls
    with two_web_processes.browser(user, first) as asker, two_web_processes.browser(user, second) as watcher, \
            asker.stream("POST", f"/api/conversations/{conversation.pk}/messages", json={"content": "go"}) as answer:
        answered = events_of(answer, SSEParser())
        generation_id = next(answered)[1]["generation_id"]
        with watcher.stream("GET", f"/api/generations/{generation_id}/events") as watch:
            watched = events_of(watch, SSEParser())
            yield generation_id, asker, answered, watched


def test_a_password_change_ends_the_other_browsers_watch_on_the_other_web_process_and_the_answer_goes_on(
        two_web_processes, user, conversation, upstream):
    with asked_on_one_watched_by_another_session_on_the_other(two_web_processes, user, conversation, upstream) as (
            generation_id, owner, answered, watched):
        seen = [next(watched)]
        changed = owner.post("/api/auth/password", json={"old_password": "a-long-test-password",
                                                         "new_password": NEW_PASSWORD})
        seen += watched
        status_when_the_watch_ended = Generation.objects.get(pk=generation_id).status
        answered = list(answered)

    generation = Generation.objects.select_related("message").get(pk=generation_id)
    assert changed.status_code == 200
    assert signed_out_event(seen) and status_when_the_watch_ended == "streaming"
    assert len(shown(seen)) < len("".join(CHUNKS))
    assert answered[-1][0] == "done" and answered[-1][1]["status"] == "completed"
    assert generation.message.content == "".join(CHUNKS)


@pytest.mark.parametrize("process", ["the same", "the other"])
def test_signing_out_stops_the_answer_that_session_asked_and_its_watchers_see_it_stopped(
        two_web_processes, user, conversation, upstream, process):
    first, second = two_web_processes.process_urls
    with asked_on_one_watched_by_another_session_on_the_other(two_web_processes, user, conversation, upstream) as (
            generation_id, asker, answered, watched):
        answered_before = [next(answered), next(answered)]
        with httpx2.Client(base_url=first if process == "the same" else second, cookies=asker.cookies,
                           headers=asker.headers, timeout=30) as same_session:
            signed_out = same_session.post("/api/auth/logout")
        answered_after = list(answered)
        watched = list(watched)

    generation = Generation.objects.select_related("message").get(pk=generation_id)
    assert signed_out.status_code == 200
    assert signed_out_event(answered_after)
    assert len(shown(answered_before + answered_after)) < len("".join(CHUNKS))
    assert generation.status == "stopped" and generation.cancelled_by == "signed_out"
    assert watched[-1][0] == "done" and watched[-1][1]["status"] == "stopped"
    assert upstream.hung_up.wait(10)
