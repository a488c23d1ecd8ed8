"""The async views' database work runs on a few threads that keep their connections."""

from concurrent.futures import ThreadPoolExecutor

import httpx2
import pytest
from django.conf import settings
from django.db import OperationalError, connection

from chatapp.runtime.database_threads import close_broken_connections
from tests import servers

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def signed_in_daphne(user):
    """A real daphne on the test database (the test client never closes connections) and a
    client signed in to it."""
    with servers.daphne_on(servers.shared_database_url()) as base_url, \
            httpx2.Client(base_url=base_url, timeout=30) as client:
        servers.sign_in(client, user)
        yield client


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


def terminate_the_other_backends() -> int:
    """Every session on the test database but this one, as an administrator's restart would."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                       " WHERE datname = current_database() AND pid <> pg_backend_pid()")
        return len(cursor.fetchall())


@pytest.mark.process
def test_requests_at_the_same_time_open_no_more_connections_than_there_are_threads(signed_in_daphne):
    client = signed_in_daphne
    before = connections_opened(client)

    statuses = statuses_of_a_burst(client)

    assert statuses == [200] * 40
    assert connections_opened(client) - before <= settings.CHAT_DATABASE_THREADS < 40


@pytest.mark.process
@pytest.mark.skipif(connection.vendor != "postgresql", reason="a server that drops connections")
def test_losing_every_connection_costs_at_most_one_failed_request_not_one_per_thread(signed_in_daphne):
    client = signed_in_daphne
    assert statuses_of_a_burst(client) == [200] * 40  # every thread holds a connection now
    assert terminate_the_other_backends() >= settings.CHAT_DATABASE_THREADS

    first = client.get("/api/conversations").status_code  # the thread it lands on finds out
    burst = statuses_of_a_burst(client)

    failed = [status for status in [first, *burst] if status != 200]
    assert len(failed) <= 1, f"{len(failed)} requests failed: {failed}"


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
