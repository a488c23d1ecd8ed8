"""A web process told to stop (SIGTERM: a redeploy, `make run` stopped, Docker's restart) ends the
answers it relays before it exits: each `stopped`, `cancelled_by` `shutdown`, with every
character it sent, the upstream closed. Left to the reaper they would stay `streaming`, the
page's resume saying "Writing…" over nothing for some 20 s, then end `failed` (`interrupted`)
with the text of the last partial save only.
"""

import json
import signal
from contextlib import contextmanager

import httpx2
import pytest
from django.conf import settings as django_settings

from chatapp.models import Generation
from common.sse import SSEParser
from tests import servers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]

STOP_WAIT_S = 30


def web_process(upstream, grace_s: str):
    return servers.daphne_process_on(servers.shared_database_url(), env={
        "INFERENCE_URL": django_settings.INFERENCE_URL, "TEST_CHAT_RESUME_GRACE_SECONDS": grace_s,
        "CHAT_SAVE_INTERVAL_SECONDS": "60"})  # no partial save: the text is the final write's


def read_until(chunks, text: str) -> tuple[int, str]:
    """Reads the stream's `chunks` until its deltas hold `text`; its generation's id and their
    text. The iterator stays the caller's, open: one dropped here would be closed, and httpx2
    closes the connection with it, the page gone a moment before the signal (`client_gone`)."""
    parser, events = SSEParser(), []
    for chunk in chunks:
        events += parser.feed(chunk)
        seen = "".join(json.loads(event.data)["text"] for event in events if event.event == "delta")
        if seen == text:
            return json.loads(events[0].data)["generation_id"], seen
    raise AssertionError(f"the stream ended after {events}")


@contextmanager
def an_answer_read_to_its_pause(user, conversation, upstream, grace_s: str):
    """A web process relaying an answer whose upstream went quiet after "One two three", its page
    connected and that far in; yields the process, the open response, the generation's id and
    the text read."""
    upstream.script.chunks = ["One", " two", " three", " four"]
    upstream.script.stall_after = 3
    with web_process(upstream, grace_s) as (base_url, process), httpx2.Client(base_url=base_url, timeout=30) as page:
        servers.sign_in(page, user)
        with page.stream("POST", f"/api/conversations/{conversation.pk}/messages", json={"content": "go"},
                         headers={"X-CSRFToken": page.cookies["csrftoken"]}) as response:
            chunks = response.iter_raw()  # held to the block's end: the page stays connected
            yield process.process, response, *read_until(chunks, "One two three")


@pytest.mark.parametrize("grace_s", ["0", "30"])
def test_an_answer_streaming_when_its_web_process_is_told_to_stop_ends_stopped_by_shutdown_with_its_text(
        user, conversation, upstream, grace_s):
    with an_answer_read_to_its_pause(user, conversation, upstream, grace_s) as (process, _, generation_id, seen):
        process.send_signal(signal.SIGTERM)
        exit_status = process.wait(timeout=STOP_WAIT_S)
    generation = Generation.objects.select_related("message").get(pk=generation_id)

    assert exit_status == 0
    assert (generation.status, generation.finish_reason, generation.cancelled_by) == ("stopped", "cancelled", "shutdown")
    assert generation.final_text == generation.message.content == seen == "One two three"
    assert generation.message.status == "stopped"
    assert upstream.hung_up.wait(10)


def test_an_answer_its_page_left_ends_stopped_by_shutdown_when_its_web_process_is_told_to_stop(
        user, conversation, upstream):
    with an_answer_read_to_its_pause(user, conversation, upstream, "30") as (process, response, generation_id, seen):
        response.close()  # the page's connection is gone: the answer goes on unattended, for the grace
        process.send_signal(signal.SIGTERM)
        exit_status = process.wait(timeout=STOP_WAIT_S)
    generation = Generation.objects.select_related("message").get(pk=generation_id)

    assert exit_status == 0
    assert (generation.status, generation.cancelled_by) == ("stopped", "shutdown")
    assert generation.final_text == generation.message.content == seen
    assert upstream.hung_up.wait(10)
