"""The health endpoint says whether the app can reach its database."""

import httpx

from tests import servers


def test_health_is_503_with_the_reason_when_the_database_cannot_be_reached():
    # The front page needs no database: it says the process is up.
    with servers.daphne_on("postgres://nobody@127.0.0.1:9/nothing-listens-here", ready_path="/") as base_url:
        first = httpx.get(f"{base_url}/healthz", timeout=30)
        again = httpx.get(f"{base_url}/healthz", timeout=30)

    assert [first.status_code, again.status_code] == [503, 503]
    assert first.json()["status"] == "unhealthy" and "127.0.0.1" in first.json()["error"]
