"""The health endpoint says whether the app can reach its database."""

import httpx

from tests import servers


def app_at(database_url: str):
    port = servers.free_port()
    command, env = servers.daphne_command(port)
    env |= {"DATABASE_URL": database_url, "DJANGO_SECRET_KEY": "test-secret-" + "x" * 40}
    # The front page needs no database: it says the process is up.
    return port, servers.running(command, env=env, ready_url=f"http://127.0.0.1:{port}/")


def test_health_is_503_with_the_reason_when_the_database_cannot_be_reached():
    port, app = app_at("postgres://nobody@127.0.0.1:9/nothing-listens-here")
    with app:
        first = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=30)
        again = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=30)

    assert [first.status_code, again.status_code] == [503, 503]
    assert first.json()["status"] == "unhealthy" and "127.0.0.1" in first.json()["error"]
