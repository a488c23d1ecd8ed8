"""A Stop pressed just before the page goes (a reload, the tab closed), in a real browser through
nginx, on a stack where an answer outlives its page's connection (`stack_with_grace`):
the Stop still reaches the server, rather than going with the page while the answer writes on."""

import contextlib

import playwright.sync_api
import pytest

from chatapp.models import Generation
from harness import waiting
from harness.page_probes import last_answer, send, wait_for_handled, wait_for_streaming_text
from tests.browser.conftest import held, sign_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

STOPS = "**/api/generations/*/stop"


def test_a_stop_still_on_its_way_when_the_page_reloads_stops_the_answer(page, stack_with_grace, user, upstream):
    """The Stop went with the page that sent it: after the reload the answer was "Writing…" again,
    and went on for as long as its model wrote (a slow network, or a reload pressed at once)."""
    upstream.script.chunks = ["Hello", ", ", "world"]
    upstream.script.stall_after = 2  # then quiet, as a model still thinking
    sign_in(page, stack_with_grace, user)
    send(page, "Say hello")
    wait_for_streaming_text(page, "Hello, ")
    stops = held(page, STOPS)  # a slow network: the Stop is on its way as the page goes
    page.click("#stop")
    wait_for_handled(page, lambda: len(stops) == 1, "the Stop sent")
    page.unroute(STOPS)

    page.reload()
    # The network delivers it at last, if the browser had not sent it on already.
    with contextlib.suppress(playwright.sync_api.Error):
        stops[0].continue_()

    waiting.wait_until(lambda: Generation.objects.get().status not in Generation.LIVE_STATUSES, 15,
                       "the stopped answer's final write")
    generation = Generation.objects.select_related("message").get()
    assert (generation.status, generation.cancelled_by) == ("stopped", "user")
    assert generation.message.content == "Hello, "
    page.wait_for_selector('#messages .message[data-role="assistant"][data-status="stopped"]')
    assert last_answer(page).locator(".message-state").inner_text() == "Stopped"
