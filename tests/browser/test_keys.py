"""Keys in a real browser through nginx: Escape stops an answer being written, but not from a
field that has an Escape of its own, and a key an input method (Japanese, Chinese, Korean) is
composing with belongs to it: its Enter picks a candidate, its Escape drops one."""

import pytest

from harness.page_probes import send, wait_for_handled, wait_for_streaming_text, wait_for_true
from tests import factories
from tests.browser.conftest import sign_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

STREAMING = "document.body.dataset.streaming === 'true'"


@pytest.fixture
def chat(page, stack_with_fake_upstream, user, upstream):
    sign_in(page, stack_with_fake_upstream, user)
    page.requests_sent = []
    page.on("request", lambda request: page.requests_sent.append((request.method, request.url)))
    return page


def composing(page, selector: str, key: str) -> None:
    """`key` as an input method sends it mid-composition (Playwright's keyboard cannot compose)."""
    page.dispatch_event(selector, "keydown",
                        {"key": key, "isComposing": True, "bubbles": True, "cancelable": True})


def stops_sent(page) -> list:
    return [url for method, url in page.requests_sent if method == "POST" and url.endswith("/stop")]


def test_enter_that_picks_an_input_method_candidate_does_not_commit_a_rename(chat, user):
    conversation = factories.conversation(owner=user, title="Old name")
    chat.reload()
    item = f'#conversation-list li[data-conversation-id="{conversation.pk}"]'
    chat.click(f"{item} .conversation-rename")
    chat.fill(".conversation-title-input", "にほん")

    composing(chat, ".conversation-title-input", "Enter")

    assert chat.locator(".conversation-title-input").is_visible()
    assert [url for method, url in chat.requests_sent if method == "PATCH"] == []
    chat.fill(".conversation-title-input", "日本")
    chat.press(".conversation-title-input", "Enter")
    wait_for_true(chat, f"document.querySelector('{item} .conversation-open').textContent === '日本'")
def test_escape_stops_the_answer_from_the_composer_not_mid_composition_nor_from_search_or_settings(
        chat, upstream):
    upstream.script.chunks = ["Hello", ", ", "world"]
    upstream.script.stall_after = 2  # then quiet: the answer is being written until stopped
    send(chat, "Say hello")
    wait_for_streaming_text(chat, "Hello, ")

    composing(chat, "#composer", "Escape")
    chat.press("#conversation-search", "Escape")
    chat.click("#settings-toggle")
    chat.press("#settings-temperature", "Escape")
    chat.press("#settings-system-prompt", "Escape")

    assert chat.evaluate(STREAMING)
    assert stops_sent(chat) == []
    chat.press("#composer", "Escape")
    wait_for_true(chat, "document.body.dataset.streaming === 'false'")
    wait_for_handled(chat, lambda: len(stops_sent(chat)) == 1, "the Stop sent")




def test_continue_pressed_from_the_keyboard_hands_the_focus_to_stop(chat, user, upstream):
    conversation = factories.conversation(owner=user, title="Cut short")
    factories.message(conversation, content="Tell me a long story")
    answer = factories.message(conversation, role="assistant", status="truncated", content="Once upon")
    factories.generation(answer, finish_reason="length", final_text="Once upon")
    upstream.script.chunks, upstream.script.stall_after = [" a time", " there", " was"], 1
    chat.reload()
    chat.click(f'#conversation-list li[data-conversation-id="{conversation.pk}"] .conversation-open')
    chat.locator("#messages .continue").focus()

    chat.keyboard.press("Enter")

    wait_for_true(chat, STREAMING)
    wait_for_true(chat, "document.activeElement.id === 'stop'")  # not the body: the button hid


def test_show_older_pressed_from_the_keyboard_on_the_last_page_moves_the_focus_to_what_it_showed(chat, user):
    made = [factories.conversation(owner=user, title=f"conv {n:02d}") for n in range(23)]
    chat.reload()
    wait_for_true(chat, "document.querySelectorAll('#conversation-list li').length === 20")
    chat.locator("#more-conversations").focus()

    chat.keyboard.press("Enter")

    wait_for_true(chat, "document.querySelectorAll('#conversation-list li').length === 23")
    wait_for_true(chat, f"document.activeElement.closest('li')?.dataset.conversationId === '{made[2].pk}'")
