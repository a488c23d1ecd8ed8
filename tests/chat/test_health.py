"""The health endpoint says whether the app can reach its database, and never how it failed."""

import httpx2
import pytest

from tests import servers

pytestmark = pytest.mark.process

UNREACHABLE = "postgres://nobody:a-secret-password@127.0.0.1:9/nothing-listens-here"


def test_health_is_503_with_a_fixed_message_and_the_database_error_only_in_the_log():
    # The front page needs no database: it says the process is up.
    with servers.daphne_process_on(UNREACHABLE, ready_path="/") as (base_url, daphne):
        first = httpx2.get(f"{base_url}/healthz", timeout=30)
        again = httpx2.get(f"{base_url}/healthz", timeout=30)
        log = daphne.log_text()

    assert [first.status_code, again.status_code] == [503, 503]
    assert first.json() == {"status": "unhealthy", "error": "the database does not answer"}
    assert "127.0.0.1" not in first.text and "nobody" not in first.text
    assert "127.0.0.1" in log and "port 9" in log
