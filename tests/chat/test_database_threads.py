"""The async views' database work runs on a few threads that keep their connections."""

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx2
import pytest
from django.conf import settings
from django.db import OperationalError, connection

from chatapp.models import Conversation
from chatapp.runtime.database_threads import close_broken_connections, on_database_thread
from common.sse import SSEParser
from harness.database_administrator import DatabaseAdministrator
from tests import factories, servers
from tests.fakes.upstream import Script

pytestmark = pytest.mark.django_db(transaction=True)


def connections_opened(client) -> int:
    return client.get("/api/_probe/connections").json()["opened"]


@pytest.mark.process
def test_requests_one_after_another_open_at_most_one_connection_per_thread(signed_in_daphne):
    client = signed_in_daphne
    before = connections_opened(client)

    statuses = [client.get("/api/conversations").status_code for _ in range(30)]

    assert statuses == [200] * 30
    assert connections_opened(client) - before <= settings.CHAT_DATABASE_THREADS < 30


def statuses_of_a_burst(client, count: int = 40) -> list[int]:
    """`count` requests at the same time: enough to give every database thread work."""
    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(lambda _: client.get("/api/conversations").status_code, range(count)))


def terminate_the_servers_backends() -> int:
    """Every session on the test database but this test process's own, as an administrator's
    restart would end the app's (the later tests use this process's)."""
    with DatabaseAdministrator(servers.shared_database_url()) as administrator:
        return administrator.end_sessions()


def terminate(backends: list[int]) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s) AS pid", [backends])


@pytest.mark.process
def test_requests_at_the_same_time_open_no_more_connections_than_there_are_threads(signed_in_daphne):
    client = signed_in_daphne
    before = connections_opened(client)

    statuses = statuses_of_a_burst(client)

    assert statuses == [200] * 40
    assert connections_opened(client) - before <= settings.CHAT_DATABASE_THREADS < 40


@pytest.mark.process
@pytest.mark.skipif(connection.vendor != "postgresql", reason="a server that drops connections")
def test_after_every_session_is_terminated_no_request_fails_at_once_or_one_by_one(signed_in_daphne):
    client = signed_in_daphne
    assert statuses_of_a_burst(client) == [200] * 40  # every thread holds a connection now
    assert terminate_the_servers_backends() >= settings.CHAT_DATABASE_THREADS

    at_once = statuses_of_a_burst(client, 30)
    assert statuses_of_a_burst(client) == [200] * 40
    assert terminate_the_servers_backends() >= settings.CHAT_DATABASE_THREADS
    one_by_one = [client.get("/api/conversations").status_code for _ in range(30)]

    assert at_once == [200] * 30
    assert one_by_one == [200] * 30


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a server that drops connections")
@pytest.mark.process
def test_after_every_session_is_terminated_under_streams_no_request_fails_and_the_answers_end(user, upstream):
    upstream.script = Script(chunks=[f" word{i}" for i in range(60)], interval_s=0.05)
    conversations = [factories.conversation(owner=user) for _ in range(4)]
    env = {"INFERENCE_URL": settings.INFERENCE_URL, "CHAT_MAX_STREAMS_PER_USER": "4",
           "CHAT_SAVE_INTERVAL_SECONDS": "0.1"}
    with servers.daphne_on(servers.shared_database_url(), env=env) as base_url, \
            httpx2.Client(base_url=base_url, timeout=60) as client, ThreadPoolExecutor(max_workers=8) as pool:
        servers.sign_in(client, user)
        client.headers["X-CSRFToken"] = client.cookies["csrftoken"]
        started = [threading.Event() for _ in conversations]
        answers = [pool.submit(read_the_answer, client, found.pk, began)
                   for found, began in zip(conversations, started)]
        for began in started:
            assert began.wait(30), "an answer did not start"
        assert terminate_the_servers_backends() >= 1

        statuses = [client.get("/api/conversations").status_code for _ in range(30)]
        endings = [answer.result(timeout=60) for answer in answers]

    assert statuses == [200] * 30
    assert endings == ["done"] * 4


def read_the_answer(client, conversation_id: int, began: threading.Event) -> str:
    """Streams one answer; `began` is set at its first delta. Returns its last event's name."""
    parser, last = SSEParser(), None
    with client.stream("POST", f"/api/conversations/{conversation_id}/messages", json={"content": "go"}) as response:
        assert response.status_code == 200, response.read()
        for chunk in response.iter_bytes():
            for event in parser.feed(chunk):
                last = event.event
                if last == "delta":
                    began.set()
    return last


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a server that drops a connection")
def test_a_connection_the_server_dropped_is_closed_so_the_next_call_opens_a_fresh_one():
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (dropped,) = cursor.fetchone()
    with pytest.raises(OperationalError), connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        cursor.execute("SELECT 1")

    close_broken_connections()

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        assert cursor.fetchone()[0] != dropped


def backends_of_every_database_thread() -> list[int]:
    """Every database thread opens its connection (one call each, held until all have one);
    their server processes."""
    barrier = threading.Barrier(settings.CHAT_DATABASE_THREADS)

    def open_own():
        barrier.wait(30)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            return cursor.fetchone()[0]

    async def all_threads():
        return await asyncio.gather(*(on_database_thread(open_own)() for _ in range(settings.CHAT_DATABASE_THREADS)))

    return asyncio.run(all_threads())


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a server that drops connections")
def test_a_read_on_a_dead_connection_runs_once_more_and_a_write_does_not(user):
    terminate(backends_of_every_database_thread())
    runs = {"read": 0, "write": 0}

    def read():
        runs["read"] += 1
        return Conversation.objects.count()

    def write():
        runs["write"] += 1
        return factories.conversation(owner=user)

    assert asyncio.run(on_database_thread(read)()) == 0
    terminate(backends_of_every_database_thread())
    with pytest.raises(OperationalError):
        asyncio.run(on_database_thread(write)())

    assert runs == {"read": 2, "write": 1}
    assert Conversation.objects.count() == 0
