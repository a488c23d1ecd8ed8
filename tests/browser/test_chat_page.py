"""The chat page in a real browser, against nginx + daphne and a stand-in upstream."""

import pytest

from chatapp.models import Message
from harness.page_probes import FRAME_PROBE, last_answer, send, wait_for_end, wait_for_true
from tests.browser.conftest import sign_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def chat(page, stack_with_fake_upstream, user, upstream):
    page.add_init_script(FRAME_PROBE)
    sign_in(page, stack_with_fake_upstream, user)
    return page


def test_an_answer_grows_over_several_paints_then_becomes_highlighted_markdown(chat, upstream):
    upstream.script.chunks = ["Here ", "is ", "**code**:", "\n\n", "```python\n", "def add(a, b):\n",
                              "    return a + b\n", "```\n", "\nDone."]
    upstream.script.interval_s = 0.1

    send(chat, "Show me code")
    wait_for_end(chat)

    growth = chat.evaluate("window.__growth")
    answer = last_answer(chat)
    assert len(set(growth)) >= 4  # seen growing, frame after frame, before the end
    assert answer.get_attribute("data-status") == "completed"
    assert answer.locator(".message-content strong").inner_text() == "code"
    assert answer.locator("pre code.hljs .hljs-keyword").first.inner_text() == "def"
    assert answer.locator(".copy-code").count() == 1
    # The first message names the conversation, in the list and in the page's heading.
    wait_for_true(chat, "document.querySelector('#conversation-title').textContent === 'Show me code'")
    assert chat.console_errors == []


def test_model_output_that_carries_html_and_scripts_runs_nothing(chat, upstream):
    upstream.script.chunks = [
        'Look <img src=x onerror="window.__pwned=1"> ',
        "<script>window.__pwned=2</script> ",
        "[click me](javascript:window.__pwned=3) ",
        '<a href="javascript:window.__pwned=4">raw link</a> ',
        "![pic](javascript:window.__pwned=5)",
    ]

    send(chat, "attack")
    wait_for_end(chat)
    answer = last_answer(chat)
    for link in answer.locator(".message-content a").all():
        link.click()

    assert chat.evaluate("window.__pwned") is None
    assert answer.locator(".message-content img[onerror], .message-content script").count() == 0
    assert answer.locator('.message-content [href^="javascript:"]').count() == 0


def test_an_upstream_crash_mid_answer_keeps_the_text_and_offers_retry(chat, upstream):
    upstream.script.chunks = ["Partial ", "answer ", "that ", "breaks"]
    upstream.script.interval_s = 0.05
    upstream.script.crash_after = 3

    send(chat, "please crash")
    wait_for_end(chat)

    answer = last_answer(chat)
    assert answer.get_attribute("data-status") == "failed"
    assert "Partial answer that" in answer.locator(".message-content").inner_text()
    assert answer.locator(".retry").is_visible()
    stored = Message.objects.filter(role="assistant").last()
    assert stored.status == "failed" and stored.content == "Partial answer that "


def test_a_flood_of_twenty_thousand_tokens_paints_at_most_once_a_frame_and_arrives_whole(chat, upstream):
    upstream.script.chunks = [f"w{i} " for i in range(20_000)]

    send(chat, "flood")
    wait_for_end(chat, timeout_ms=300_000)

    paints, frames = chat.evaluate("[window.chatappStats.paints, window.__frames]")
    text = last_answer(chat).locator(".message-content").inner_text()
    assert 0 < paints <= frames
    assert text.split() == [f"w{i}" for i in range(20_000)]
    assert last_answer(chat).get_attribute("data-status") == "completed"
