"""In a real browser through nginx, on a stack where an answer outlives its page's connection for
a while (`stack_with_grace`, as with the default settings): a Stop pressed just before the page
goes (a reload, the tab closed), or refused because the session had ended elsewhere, still
reaches the server, rather than going with the page while the answer writes on; and the tab that
asked, closed mid-answer, leaves another tab of the browser following the answer to its end."""

import contextlib
from urllib.parse import urlsplit

import playwright.sync_api
import pytest

from django.contrib.sessions.models import Session

from chatapp.models import Generation, Message
from common.vocabulary import CancelledBy, GenerationStatus
from harness import waiting
from harness.page_probes import (last_answer, send, wait_for_end, wait_for_handled, wait_for_streaming_text,
                                 wait_for_true)
from tests.browser.conftest import held, sign_in, sign_in_on_form

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

STOPS = "**/api/generations/*/stop"
ANSWER = [f"w{i} " for i in range(120)]
STREAMING = '#messages .message[data-role="assistant"][data-status="streaming"]'


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


def test_a_stop_pressed_after_the_session_ended_elsewhere_reaches_the_answer_once_signed_in_again(
        page, stack_with_grace, user, upstream):
    """Signed out in another tab (or expired), the Stop was refused (401) and never sent again:
    the answer ran on to its length limit, holding the model, and read back as that whole text.
    Refused, the page shows the sign-in form and sends the Stop again once signed in; the answer
    goes on meanwhile, for the grace. The session that asked for it has ended too, which ends its
    streams at the hub's next read of the sessions (session_ends.py): on a machine slow enough
    that the sign-in takes a heartbeat, that may come first, and stops it where the page did.

    The Stop is pressed while the session holds and reaches the server after it ended (held, then
    let go), once the page has read the conversation list again at the answer's end: the Stop's
    refusal is then the only news the page has of the session's end (it showed no sign-in form,
    the Stop sent again in the background, unseen). Pressed after, the hub's read could end the
    answer, taking its Stop button away, before the click landed."""
    upstream.script.chunks = ["Hello", ", ", "world"]
    upstream.script.stall_after = 2
    sign_in(page, stack_with_grace, user)
    send(page, "Say hello")
    wait_for_streaming_text(page, "Hello, ")
    sent, finished = [], []
    page.on("request", lambda request: sent.append(request))
    page.on("requestfinished", lambda request: finished.append(request))
    stops = held(page, STOPS, most=1)
    page.click("#stop")
    wait_for_handled(page, lambda: list_read_after(stops, sent, finished), "the list read after the Stop")

    Session.objects.all().delete()  # signed out in another tab
    stops[0].continue_()
    page.wait_for_selector("#login-form", state="visible")
    sign_in_on_form(page, user)

    waiting.wait_until(lambda: Generation.objects.filter(status=GenerationStatus.STOPPED).exists(),
                       30, "the answer stopped")
    assert Generation.objects.get().cancelled_by in (CancelledBy.USER, CancelledBy.SIGNED_OUT)
    assert Message.objects.get(role="assistant").content == "Hello, "


def list_read_after(stops: list, sent: list, finished: list) -> bool:
    """Whether a read of the conversation list sent after the (held) Stop has finished."""
    if not stops:
        return False
    after = sent[sent.index(stops[0].request) + 1:]
    return any(request in finished and urlsplit(request.url).path == "/api/conversations" for request in after)


def test_the_tab_that_asked_closed_mid_answer_leaves_the_other_tab_following_it_to_its_end(
        page, stack_with_grace, user, upstream):
    upstream.script.chunks, upstream.script.interval_s = ANSWER, 0.04
    sign_in(page, stack_with_grace, user)
    send(page, "count slowly")
    wait_for_true(page, "window.chatappStats.paints >= 3")
    other = page.context.new_page()
    other.goto(page.url)
    other.wait_for_selector(STREAMING)

    page.close()
    wait_for_end(other)

    waiting.wait_until(lambda: Message.objects.get(role="assistant").status != "streaming", 30,
                       "the answer's final write")
    generation = Generation.objects.select_related("message").get()
    shown = last_answer(other).locator(".message-content").inner_text()
    assert (generation.status, generation.cancelled_by) == ("completed", "")
    assert shown.split() == generation.message.content.split() == [w.strip() for w in ANSWER]
    assert last_answer(other).get_attribute("data-status") == "completed"
