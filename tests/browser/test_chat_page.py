"""The chat page in a real browser, against nginx + daphne and a stand-in upstream."""

import pytest

from chatapp.models import Message
from tests import factories
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


def test_an_answer_drawn_as_markdown_keeps_the_lines_it_was_streamed_in(chat, upstream):
    # A poem, an address, steps: a model ends its lines with one newline, which Markdown alone
    # would fold into spaces the moment the answer ends, under the reader's eyes.
    upstream.script.chunks = ["The sea, a mystic land,\n", "where dreams unfold \U0001f30a\n",
                              "Cafe\u0301 na\u00efve \u65e5\u672c\n", "\nA verse of its own\n", "ends here."]

    send(chat, "A poem, please")
    wait_for_end(chat)

    shown = last_answer(chat).locator(".message-content").inner_text()
    assert [line for line in shown.splitlines() if line] == [
        "The sea, a mystic land,", "where dreams unfold \U0001f30a", "Cafe\u0301 na\u00efve \u65e5\u672c",
        "A verse of its own", "ends here."]


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


def test_character_references_in_an_answer_are_shown_as_written_as_its_html_is(chat, upstream):
    # What streamed stays once the answer is drawn: "&amp;" did not turn into "&" at the end.
    upstream.script.chunks = ["In HTML, write &amp; ", "for &, &lt;b&gt; for <b>, ", "&#169; for \u00a9 and ",
                              "`&nbsp;` for a space."]

    send(chat, "entities")
    wait_for_end(chat)

    assert last_answer(chat).locator(".message-content").inner_text() == (
        "In HTML, write &amp; for &, &lt;b&gt; for <b>, &#169; for \u00a9 and &nbsp; for a space.")


# A few kilobytes of Markdown nested this deep overflow the parser's recursion (marked's stack,
# in Chromium, at about 2,000 levels): a model made to write it must not take the page down.
TOO_DEEP = ["Before.\n\n", ">" * 3000 + " quoted\n\n", "- " * 2000 + "listed\n\n",
            "*" * 2000 + "starred" + "*" * 2000 + "\n\n", "After."]


def test_an_answer_nested_too_deep_to_render_ends_and_is_shown_as_its_text(chat, upstream):
    upstream.script.chunks = TOO_DEEP

    send(chat, "nest it")
    wait_for_end(chat)

    answer = last_answer(chat)
    assert answer.get_attribute("data-status") == "completed"
    words = answer.locator(".message-content").inner_text().split()
    assert words[0] == "Before." and words[-1] == "After." and "listed" in words
    assert chat.locator("#alert").is_hidden()
    assert chat.console_errors == []


def test_a_stored_answer_nested_too_deep_to_render_leaves_its_conversation_readable(
        page, stack_with_fake_upstream, user):
    conversation = factories.conversation(owner=user, title="Deep")
    factories.message(conversation, content="nest it")
    factories.message(conversation, role=Message.Role.ASSISTANT, content="".join(TOO_DEEP))
    sign_in(page, stack_with_fake_upstream, user)

    page.evaluate(f"location.hash = '#/c/{conversation.pk}'")

    wait_for_true(page, "document.querySelectorAll('#messages .message').length === 2")
    words = last_answer(page).locator(".message-content").inner_text().split()
    assert words[0] == "Before." and words[-1] == "After." and "listed" in words
    assert page.locator("#alert").is_hidden()
    assert page.console_errors == []


# The longest task the page's thread ran, as Chromium's Long Tasks API reports it.
LONGEST_TASK_PROBE = """
window.__longestTaskMs = 0;
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) window.__longestTaskMs = Math.max(window.__longestTaskMs, entry.duration);
}).observe({ type: "longtask" });
"""


def test_a_stored_answer_the_parser_would_take_minutes_over_leaves_the_page_answering(
        page, stack_with_fake_upstream, user):
    # Marked's emphasis rule is quadratic on intraword underscores: parsed on the page's
    # thread, this 200 KB line held it for minutes.
    conversation = factories.conversation(owner=user, title="Slow")
    factories.message(conversation, content="slow it")
    factories.message(conversation, role=Message.Role.ASSISTANT, content="_a" * 100_000 + " end")
    factories.message(conversation, content="and a long ordinary one")
    factories.message(conversation, role=Message.Role.ASSISTANT, content="A **bold** point.\n\n" * 1_000)
    page.add_init_script(LONGEST_TASK_PROBE)
    sign_in(page, stack_with_fake_upstream, user)

    page.evaluate(f"location.hash = '#/c/{conversation.pk}'")
    wait_for_true(page, "document.querySelectorAll('#messages .message').length === 4")
    page.fill("#composer", "still answering")

    slow = page.locator('#messages .message[data-role="assistant"] .message-content').first
    assert slow.inner_text().endswith("_a end")
    # The slow one is given up on, and the one after it still becomes Markdown.
    wait_for_true(page, "document.querySelectorAll('#messages .message-content strong').length === 1000")
    assert page.evaluate("window.__longestTaskMs") < 10_000  # minutes, before
    assert page.console_errors == []


def test_a_long_stored_answer_is_rendered_as_markdown_off_the_pages_thread(page, stack_with_fake_upstream, user):
    conversation = factories.conversation(owner=user, title="Long")
    factories.message(conversation, content="a long one")
    factories.message(conversation, role=Message.Role.ASSISTANT,
                      content="Intro.\n\n" + "A **bold** point and `code`.\n\n" * 1_500 + "```python\nx = 1\n```\n")
    sign_in(page, stack_with_fake_upstream, user)

    page.evaluate(f"location.hash = '#/c/{conversation.pk}'")

    wait_for_true(page, "document.querySelectorAll('#messages .message-content strong').length === 1500")
    assert last_answer(page).locator("pre code.hljs").count() == 1
    assert last_answer(page).locator(".copy-code").count() == 1
    assert page.console_errors == []


def test_an_image_inside_a_link_is_that_links_words_and_loads_nothing(chat, upstream):
    upstream.script.chunks = ["Status: ", "[![build passing](http://127.0.0.1:9/badge.svg)]", "(https://ci.example/build)"]

    send(chat, "badge")
    wait_for_end(chat)

    links = last_answer(chat).locator(".message-content a")
    assert [(link.inner_text(), link.get_attribute("href")) for link in links.all()] == [
        ("build passing", "https://ci.example/build")]
    assert last_answer(chat).locator(".message-content img").count() == 0


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


def test_invisible_and_direction_characters_in_code_are_shown_where_they_are_and_still_copied(chat, upstream):
    """Trojan Source: direction overrides in code made it read otherwise than it runs, unseen."""
    code = 'if access_level != "user\u202e \u2066// Check if admin\u2069 \u2066":\n    grant()\u200b\n'
    upstream.script.chunks = ["Here:\n\n```python\n", code, "```\n"]

    send(chat, "code")
    wait_for_end(chat)

    block = last_answer(chat).locator(".code-block")
    marks = block.locator("code .hidden-char")
    assert [marks.nth(i).get_attribute("title") for i in range(marks.count())] == [
        "U+202E RIGHT-TO-LEFT OVERRIDE", "U+2066 LEFT-TO-RIGHT ISOLATE", "U+2069 POP DIRECTIONAL ISOLATE",
        "U+2066 LEFT-TO-RIGHT ISOLATE", "U+200B ZERO WIDTH SPACE"]
    assert "hidden characters" in block.locator(".code-toolbar").inner_text()
    assert block.locator("code").evaluate("c => c.textContent") == code  # copied as it is
    assert chat.console_errors == []
