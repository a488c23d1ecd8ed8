"""Two tabs of one browser (one session) on one conversation: the tab that asked closes
mid-answer, and the tab that follows it reads it to its end, which is stored whole."""

import pytest

from chatapp.models import Generation, Message
from harness import waiting
from harness.page_probes import last_answer, send, wait_for_end, wait_for_true
from tests.browser.conftest import sign_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ANSWER = [f"w{i} " for i in range(120)]
STREAMING = '#messages .message[data-role="assistant"][data-status="streaming"]'


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
