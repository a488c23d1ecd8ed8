"""Two real inference services (`python -m inference`, the default model) as replicas of one.

The stand-ins of test_inference_replicas.py prove the choice and the failover in detail; these
prove them against the real service's /metrics and a real process killed between requests.
"""

import contextlib
import os
import signal

import httpx2
import pytest
from asgiref.sync import sync_to_async

from harness import child_process, ports
from stack import commands
from tests import factories
from tests.chat.streams import names, read_events
from tests.inference.serving import metric

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# Small, so that two processes start in seconds on a shared CPU.
REPLICA_ENV = {"INFERENCE_HOST": "127.0.0.1", "INFERENCE_MATRICES": "plain", "INFERENCE_THREADS": "1",
               "INFERENCE_MAX_RUNNING": "4", "INFERENCE_MAX_CACHED_TOKENS": "4096"}


@pytest.fixture(scope="module")
def started_replicas():
    """Two inference processes, started once for the module: the test that kills one runs last."""
    with contextlib.ExitStack() as running:
        pair = []
        for _ in range(2):
            port = ports.free_port()
            url = f"http://127.0.0.1:{port}"
            process = running.enter_context(child_process.running(
                commands.inference(), env={**REPLICA_ENV, "INFERENCE_PORT": str(port)},
                ready_url=f"{url}/health", timeout_s=180))
            pair.append((url, process))
        yield pair


@pytest.fixture
def replica_processes(started_replicas, settings):
    """The two replicas, listed in INFERENCE_URL; [(url, process)]."""
    settings.INFERENCE_URL = ",".join(url for url, _ in started_replicas)
    settings.CHAT_MAX_TOKENS = 4
    return started_replicas


def prompts_served(url: str) -> float:
    return metric(httpx2.get(f"{url}/metrics").text, "inference_prompt_tokens_total")


async def completed_answer(api, user) -> list[str]:
    conversation = await sync_to_async(factories.conversation)(owner=user)
    response = await api.post(f"/api/conversations/{conversation.pk}/messages", {"content": "Hi"},
                              content_type="application/json")
    assert response.status_code == 200
    events = await read_events(response)
    assert names(events)[-1] == "done" and events[-1][1]["status"] in {"completed", "truncated"}
    return names(events)


async def test_answers_spread_over_both_real_replicas(api, user, replica_processes):
    for _ in range(4):
        await completed_answer(api, user)

    assert all(prompts_served(url) > 0 for url, _ in replica_processes)


# Last in the module: it kills one of the replicas the module shares.
async def test_a_real_replica_killed_between_requests_is_skipped_without_an_error(api, user, replica_processes):
    (_, killed), (survivor, _) = replica_processes
    await completed_answer(api, user)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.process.wait()
    served_before = prompts_served(survivor)

    shown = [await completed_answer(api, user) for _ in range(3)]

    assert all("error" not in events for events in shown)
    assert prompts_served(survivor) > served_before
