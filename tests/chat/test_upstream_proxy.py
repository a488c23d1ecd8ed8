"""A proxy the environment names carries the requests to upstreams elsewhere and never those to
this machine's own loopback, which it cannot reach: `make run` in a shell behind a proxy sent
every question for its own inference service to the proxy. Each client the app asks its
upstreams with (the relay's, the catalogue's, the titles') is made by http_client."""

import asyncio

import pytest

from chatapp.upstream.http_client import async_client, sync_client
from harness.ports import free_port
from tests.servers import answering, uvicorn_in_thread


@pytest.fixture
def dead_proxy(monkeypatch):
    """HTTP_PROXY names a port nothing listens on; NO_PROXY says nothing."""
    for name in ("NO_PROXY", "no_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{free_port()}")


def test_an_upstream_on_this_machine_is_asked_directly_whatever_proxy_is_named(dead_proxy):
    heard = []
    with uvicorn_in_thread(answering([200], heard)) as upstream:
        with sync_client(timeout=10) as client:
            from_a_thread = client.get(f"{upstream}/v1/models")

        async def from_the_loop():
            async with async_client(timeout=10) as client:
                return await client.get(f"{upstream}/v1/models")

        from_a_loop = asyncio.run(from_the_loop())

    assert (from_a_thread.status_code, from_a_loop.status_code) == (200, 200)
    assert len(heard) == 2


def test_an_upstream_elsewhere_is_asked_through_the_proxy_the_environment_names(monkeypatch):
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    heard = []
    with uvicorn_in_thread(answering([200], heard)) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy)
        with sync_client(timeout=10) as client:
            response = client.get("http://gpu-box.example:8001/v1/models")

    assert response.status_code == 200
    assert len(heard) == 1 and heard[0].startswith("GET ") and "/v1/models" in heard[0]
    assert heard[0].endswith("host=gpu-box.example:8001")
