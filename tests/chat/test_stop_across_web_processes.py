"""Behind nginx, a Stop, the stream limit and a resumed answer reach across web processes.

Two daphne processes share the channel layer on Redis and the database; nginx balances them as
`make run` configures it (stack/nginx.py with nginx/chatapp.conf.template): a new request goes
to the process with fewer open ones, so while one process holds a stream the next request lands
on the other. Each process writes its own access log, which tells which one served what.
The watch stream's tests talk to each process directly instead, so that the answer is on one
and its watcher on the other by construction.
"""

import json
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest
from django.conf import settings as django_settings

from chatapp.models import Generation
from common.sse import SSEParser
from harness import child_process, ports, waiting
from stack import commands, nginx
from tests import factories, servers
from tests.chat.streams import shown

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="processes share a channel layer only on Redis"),
]

CHUNKS = [f" word{i}" for i in range(40)]


@dataclass
class TwoWebProcesses:
    base_url: str  # nginx's
    access_logs: list[Path]
    process_urls: list[str]  # each daphne's own, for a request that must reach that one

    def served_by(self, request: str) -> Path | None:
        """The access log of the process that answered `request` ("POST /api/…"), once it has."""
        return next((log for log in self.access_logs if log.exists() and f'"{request}"' in log.read_text()), None)

    @contextmanager
    def browser(self, user, base_url: str | None = None) -> Iterator[httpx2.Client]:
        """A client signed in as `user` through nginx (or at `base_url`), sending its CSRF token."""
        with httpx2.Client(base_url=base_url or self.base_url, timeout=30) as client:
            servers.sign_in(client, user)
            client.headers["X-CSRFToken"] = client.cookies["csrftoken"]
            yield client


@pytest.fixture
def two_web_processes(upstream, nginx_binary, tmp_path):
    env = {"DATABASE_URL": servers.shared_database_url(), "INFERENCE_URL": django_settings.INFERENCE_URL,
           "DJANGO_SETTINGS_MODULE": "tests.settings", "DJANGO_SECRET_KEY": "shared-test-secret-" + "x" * 40,
           "CHAT_MAX_STREAMS_PER_USER": "1", "CHAT_SAVE_INTERVAL_SECONDS": "0.1",
           "CHAT_WATCH_INTERVAL_SECONDS": "0.1", "TEST_CHAT_RESUME_GRACE_SECONDS": "10"}
    web_ports, public_port = [ports.free_port(), ports.free_port()], ports.free_port()
    logs = [tmp_path / f"web-{number}.log" for number in (1, 2)]
    site = nginx.NginxSite(listen=f"127.0.0.1:{public_port}", upstreams=tuple(f"127.0.0.1:{p}" for p in web_ports))
    config = nginx.render(site, tmp_path / "nginx")
    with ExitStack() as running:
        for port, log in zip(web_ports, logs):
            running.enter_context(child_process.running(commands.daphne(port, access_log=log), env=env,
                                                        ready_url=f"http://127.0.0.1:{port}/healthz"))
        running.enter_context(child_process.running(nginx.command(config),
                                                    ready_url=f"http://127.0.0.1:{public_port}/healthz"))
        yield TwoWebProcesses(f"http://127.0.0.1:{public_port}", logs,
                              [f"http://127.0.0.1:{port}" for port in web_ports])


def streamed_text(events) -> str:
    return "".join(json.loads(e.data)["text"] for e in events if e.event == "delta")


def test_a_stop_through_nginx_reaches_the_stream_held_by_the_other_web_process(
        two_web_processes, user, conversation, upstream):
    upstream.script.chunks = CHUNKS
    upstream.script.interval_s = 0.1
    question = f"POST /api/conversations/{conversation.pk}/messages"
    with two_web_processes.browser(user) as browser, \
            browser.stream("POST", f"/api/conversations/{conversation.pk}/messages", json={"content": "go"}) as response:
        parser, events, stop = SSEParser(), [], None
        for chunk in response.iter_raw():
            events += parser.feed(chunk)
            if stop is None and len([e for e in events if e.event == "delta"]) == 3:
                generation_id = json.loads(events[0].data)["generation_id"]
                stop = browser.post(f"/api/generations/{generation_id}/stop", json={"seen_chars": 12})
    waiting.wait_until(lambda: two_web_processes.served_by(question), 10, "the question's access log line")
    stopper = two_web_processes.served_by(f"POST /api/generations/{generation_id}/stop")
    generation = Generation.objects.select_related("message").get(pk=generation_id)

    assert stop.status_code == 202
    assert stopper is not None and stopper != two_web_processes.served_by(question)
    assert events[-1].event == "done" and json.loads(events[-1].data)["status"] == "stopped"
    assert len(streamed_text(events)) < len("".join(CHUNKS))
    assert generation.cancelled_by == "user" and generation.message.status == "stopped"
    assert generation.message.content == "".join(CHUNKS)[:12]
    assert upstream.hung_up.wait(10)


def test_the_per_user_stream_limit_holds_on_the_other_web_process(two_web_processes, user, conversation, upstream):
    upstream.script.chunks = ["Still", " going", " on", " and", " on"]
    upstream.script.interval_s = 0.2
    second_conversation = factories.conversation(owner=user)
    second = f"POST /api/conversations/{second_conversation.pk}/messages"
    with two_web_processes.browser(user) as browser, \
            browser.stream("POST", f"/api/conversations/{conversation.pk}/messages", json={"content": "go"}) as first:
        chunks = first.iter_raw()
        next(chunks)  # the answer has started: it holds the user's one stream
        refused = browser.post(f"/api/conversations/{second_conversation.pk}/messages", json={"content": "and this"})
        for _ in chunks:  # to the end, for the access log's line
            pass
    first_question = f"POST /api/conversations/{conversation.pk}/messages"
    waiting.wait_until(lambda: two_web_processes.served_by(first_question), 10, "the first answer's access log line")

    assert refused.status_code == 429 and refused.json()["error"]["code"] == "too_many_streams"
    refuser = two_web_processes.served_by(second)
    assert refuser is not None and refuser != two_web_processes.served_by(first_question)


def events_of(response, parser: SSEParser):
    """(name, payload) of each event of an httpx2 stream, as it comes."""
    for chunk in response.iter_raw():
        for event in parser.feed(chunk):
            yield event.event, json.loads(event.data)


@contextmanager
def answering_on_one_watched_from_the_other(two_web_processes, user, conversation, upstream, interval_s: float):
    """An answer of CHUNKS, `interval_s` apart, streamed by the first process, and its watch
    stream from the second, both open: (generation id, the watcher's client, watched, answered)."""
    upstream.script.chunks = CHUNKS
    upstream.script.interval_s = interval_s
    first, second = two_web_processes.process_urls
    with two_web_processes.browser(user, first) as asker, two_web_processes.browser(user, second) as watcher, \
            asker.stream("POST", f"/api/conversations/{conversation.pk}/messages", json={"content": "go"}) as answer:
        answer_events = events_of(answer, SSEParser())
        start = next(answer_events)[1]
        with watcher.stream("GET", f"/api/generations/{start['generation_id']}/events") as watch:
            yield start["generation_id"], watcher, events_of(watch, SSEParser()), answer_events


def test_a_watcher_on_the_other_web_process_follows_the_answer_to_its_done(
        two_web_processes, user, conversation, upstream):
    with answering_on_one_watched_from_the_other(two_web_processes, user, conversation, upstream, 0.05) as (
            generation_id, _, watched, answered):
        watched, answered = list(watched), list(answered)

    generation = Generation.objects.select_related("message").get(pk=generation_id)
    assert watched[0][0] == "prefix" and watched[-1][0] == "done"
    assert "delta" in [name for name, _ in watched]
    assert shown(watched) == "".join(CHUNKS) == generation.message.content
    assert watched[-1] == answered[-1] and watched[-1][1]["status"] == "completed"


def test_a_stop_sent_by_the_watchers_web_process_stops_the_answer_held_by_the_other(
        two_web_processes, user, conversation, upstream):
    with answering_on_one_watched_from_the_other(two_web_processes, user, conversation, upstream, 0.1) as (
            generation_id, watcher, watched, answered):
        seen = []
        while len(shown(seen)) < 12:
            seen.append(next(watched))
        stop = watcher.post(f"/api/generations/{generation_id}/stop", json={"seen_chars": len(shown(seen))})
        seen += watched
        answered = list(answered)

    generation = Generation.objects.select_related("message").get(pk=generation_id)
    assert stop.status_code == 202
    assert seen[-1][0] == "done" and seen[-1][1]["status"] == "stopped" and seen[-1] == answered[-1]
    assert generation.cancelled_by == "user" and generation.message.content == shown(seen)
    assert len(shown(seen)) < len("".join(CHUNKS))
    assert upstream.hung_up.wait(10)


def test_a_watch_through_nginx_arrives_while_the_answer_is_still_streaming(
        two_web_processes, user, conversation, upstream):
    upstream.script.chunks = CHUNKS
    upstream.script.interval_s = 0.1
    with two_web_processes.browser(user) as browser, \
            browser.stream("POST", f"/api/conversations/{conversation.pk}/messages", json={"content": "go"}) as answer:
        answered = events_of(answer, SSEParser())
        generation_id = next(answered)[1]["generation_id"]
        with browser.stream("GET", f"/api/generations/{generation_id}/events") as watch:
            watched = events_of(watch, SSEParser())
            first, second = next(watched), next(watched)
            status_then = Generation.objects.get(pk=generation_id).status
            rest = list(watched)
        list(answered)  # to the end

    assert (first[0], second[0]) == ("prefix", "delta") and status_then == "streaming"
    assert rest[-1][0] == "done" and shown([first, second, *rest]) == "".join(CHUNKS)


def test_a_page_whose_connection_drops_resumes_its_answer_on_the_other_web_process(
        two_web_processes, user, conversation, upstream):
    upstream.script.chunks = CHUNKS
    upstream.script.interval_s = 0.05
    first, second = two_web_processes.process_urls
    with two_web_processes.browser(user, first) as asker:
        with asker.stream("POST", f"/api/conversations/{conversation.pk}/messages", json={"content": "go"}) as answer:
            answered = events_of(answer, SSEParser())
            generation_id = next(answered)[1]["generation_id"]
            held = ""
            while len(held) < 12:
                name, payload = next(answered)
                held += payload["text"] if name == "delta" else ""
        # The connection is gone (not a Stop): the first process carries the answer on.
    with two_web_processes.browser(user, second) as resumer, \
            resumer.stream("GET", f"/api/generations/{generation_id}/events?from={len(held)}") as resumed:
        rest = list(events_of(resumed, SSEParser()))

    generation = Generation.objects.select_related("message").get(pk=generation_id)
    assert rest[0][0] == "resume" and rest[0][1]["offset"] == len(held)
    assert held + "".join(payload["text"] for name, payload in rest if name == "delta") == "".join(CHUNKS)
    assert rest[-1][0] == "done" and rest[-1][1]["status"] == "completed"
    assert generation.message.content == "".join(CHUNKS)
    assert not upstream.hung_up.is_set()
