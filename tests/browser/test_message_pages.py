"""A long conversation in a real browser: it opens at its newest page, and older pages are drawn
above as the reader scrolls up or presses Show earlier messages, in order, each message once."""

import json

import pytest

from chatapp.models import Message
from chatapp.selectors import MESSAGE_PAGE_SIZE
from harness.page_probes import alert_text, send, wait_for_end, wait_for_true
from tests import factories
from tests.browser.conftest import sign_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SHOWN_IDS = "[...document.querySelectorAll('#messages .message')].map((el) => Number(el.dataset.messageId))"
SHOWN_COUNT = "document.querySelectorAll('#messages .message').length"
AT_BOTTOM = "(() => { const l = document.getElementById('messages'); return l.scrollHeight - l.scrollTop - l.clientHeight < 2; })()"


def top_of(message_id: int) -> str:
    """Where a message's top is in the list's window, in pixels."""
    return (f"document.querySelector('#messages .message[data-message-id=\"{message_id}\"]').getBoundingClientRect().top"
            " - document.getElementById('messages').getBoundingClientRect().top")


def long_conversation(owner, count: int):
    """A conversation of `count` alternating questions and answers; it and their ids, oldest first."""
    conversation = factories.conversation(owner=owner, title="Long")
    rows = Message.objects.bulk_create(
        Message(conversation=conversation, role="user" if i % 2 == 0 else "assistant", content=f"message {i}")
        for i in range(count))
    return conversation, [m.pk for m in rows]


def stored_ids(conversation) -> list[int]:
    return list(conversation.messages.order_by("created_at", "pk").values_list("pk", flat=True))


def opened(page, base_url, user, conversation) -> None:
    sign_in(page, base_url, user)
    page.evaluate(f"location.hash = '#/c/{conversation.pk}'")
    wait_for_true(page, f"{SHOWN_COUNT} === {MESSAGE_PAGE_SIZE}")


def shown_whole(page, base_url, user):
    """A conversation of a page and ten more messages, opened, and its older page shown too."""
    conversation, ids = long_conversation(user, MESSAGE_PAGE_SIZE + 10)
    opened(page, base_url, user, conversation)
    page.get_by_role("button", name="Show earlier messages").click()
    wait_for_true(page, f"{SHOWN_COUNT} === {len(ids)}")
    return conversation, ids


def test_a_long_conversation_opens_at_its_newest_messages_and_shows_older_ones_in_order_as_the_reader_asks(
        page, stack_with_fake_upstream, user):
    conversation, ids = long_conversation(user, 2 * MESSAGE_PAGE_SIZE + 30)
    opened(page, stack_with_fake_upstream, user, conversation)

    assert page.evaluate(SHOWN_IDS) == ids[-MESSAGE_PAGE_SIZE:]
    assert page.evaluate(AT_BOTTOM)
    earlier = page.get_by_role("button", name="Show earlier messages")
    assert earlier.is_visible()

    # Scrolled to the top: the page before is drawn above, and what the reader saw stays put.
    page.evaluate("document.getElementById('messages').scrollTop = 0")
    seen_at = page.evaluate(top_of(ids[-MESSAGE_PAGE_SIZE]))
    wait_for_true(page, f"{SHOWN_COUNT} === {2 * MESSAGE_PAGE_SIZE}")
    assert page.evaluate(SHOWN_IDS) == ids[-2 * MESSAGE_PAGE_SIZE:]
    assert abs(page.evaluate(top_of(ids[-MESSAGE_PAGE_SIZE])) - seen_at) <= 1

    # From the keyboard, the button reads the rest; once nothing is older it goes, the focus to the messages.
    earlier.focus()
    page.keyboard.press("Enter")
    wait_for_true(page, f"{SHOWN_COUNT} === {len(ids)}")
    assert page.evaluate(SHOWN_IDS) == ids
    assert earlier.is_hidden()
    assert page.evaluate("document.activeElement.id") == "messages"
    assert page.locator("#alert").is_hidden()
    assert page.console_errors == []


def test_an_answer_in_a_long_conversation_reads_only_its_newest_page_and_keeps_the_older_ones_shown(
        page, stack_with_fake_upstream, user, upstream):
    conversation, ids = shown_whole(page, stack_with_fake_upstream, user)
    reads = []
    page.on("request", lambda r: r.method == "GET" and "/messages" in r.url and reads.append(r.url))

    send(page, "one more question")
    wait_for_end(page)

    wait_for_true(page, f"{SHOWN_IDS}.every((id) => id > 0)")  # the new ones named too
    shown = page.evaluate(SHOWN_IDS)
    assert shown == stored_ids(conversation) and len(shown) == len(ids) + 2
    assert reads and all("before=" not in url for url in reads)
    assert page.evaluate(AT_BOTTOM)
    assert page.console_errors == []


def test_a_message_in_an_older_page_can_be_edited_and_the_conversation_shows_as_stored(
        page, stack_with_fake_upstream, user, upstream):
    conversation, ids = shown_whole(page, stack_with_fake_upstream, user)
    question = f'#messages .message[data-message-id="{ids[4]}"]'

    page.click(f"{question} .edit")
    page.fill(".edit-input", "message 4, put better")
    page.press(".edit-input", "Enter")
    wait_for_end(page)

    wait_for_true(page, f"{SHOWN_COUNT} === 6 && {SHOWN_IDS}.every((id) => id > 0)")
    assert page.evaluate(SHOWN_IDS) == stored_ids(conversation) == [*ids[:5], stored_ids(conversation)[-1]]
    assert page.locator(f"{question} .message-content").inner_text() == "message 4, put better"
    assert page.console_errors == []


def test_a_rewrite_under_way_in_an_older_page_comes_back_in_its_editor_once_that_page_is_shown_again(
        page, stack_with_fake_upstream, user):
    """After a reload it went to the composer, where Send would post it as a new message."""
    conversation, ids = shown_whole(page, stack_with_fake_upstream, user)
    oldest = f'#messages .message[data-message-id="{ids[0]}"]'
    page.click(f"{oldest} .edit")
    page.fill(f"{oldest} .edit-input", "message 0, put better")

    page.reload()
    wait_for_true(page, f"{SHOWN_COUNT} === {MESSAGE_PAGE_SIZE}")
    assert page.input_value("#composer") == ""
    page.get_by_role("button", name="Show earlier messages").click()

    page.wait_for_selector(f"{oldest} .edit-input")
    assert page.input_value(f"{oldest} .edit-input") == "message 0, put better"
    assert page.input_value("#composer") == ""


def edited_elsewhere(conversation, ids: list[int], at: int) -> None:
    """What an edit of message `at` made in another tab leaves stored: it rewritten, every later
    message gone, a new answer after it."""
    Message.objects.filter(pk__in=ids[at + 1:]).delete()
    Message.objects.filter(pk=ids[at]).update(content=f"message {at}, put better elsewhere")
    factories.message(conversation, role="assistant", content="the answer to the rewrite")


def test_an_edit_elsewhere_that_dropped_the_page_read_from_reads_the_conversation_anew_and_goes_on(
        page, stack_with_fake_upstream, user):
    conversation, ids = long_conversation(user, 3 * MESSAGE_PAGE_SIZE + 10)
    opened(page, stack_with_fake_upstream, user, conversation)
    edited_elsewhere(conversation, ids, at=MESSAGE_PAGE_SIZE + 6)  # the messages shown are gone

    page.evaluate("document.getElementById('messages').scrollTop = 0")  # asks for the page before

    stored = stored_ids(conversation)
    assert len(stored) > MESSAGE_PAGE_SIZE  # more than the newest page: the older one is read too
    wait_for_true(page, f"JSON.stringify({SHOWN_IDS}) === '{json.dumps(stored, separators=(',', ':'))}'")
    assert "changed in another tab" in alert_text(page)
    assert "Open it again" not in alert_text(page)
    assert not page.evaluate(AT_BOTTOM)  # the reader stays among the older messages they asked for
    assert page.locator("#messages .message").last.inner_text().startswith("the answer to the rewrite")
    # The refused read, which Chromium logs, and nothing else.
    assert page.console_errors == ["Failed to load resource: the server responded with a status of 400 (Bad Request)"]


def test_the_reader_stays_in_place_on_screen_when_show_earlier_messages_goes_away(
        page, stack_with_fake_upstream, user):
    conversation, ids = long_conversation(user, MESSAGE_PAGE_SIZE + 10)
    opened(page, stack_with_fake_upstream, user, conversation)
    on_screen = f"document.querySelector('#messages .message[data-message-id=\"{ids[20]}\"]').getBoundingClientRect().top"
    page.evaluate("document.getElementById('messages').scrollTop = 600")  # away from the top: no read yet
    seen_at = page.evaluate(on_screen)

    page.get_by_role("button", name="Show earlier messages").click()

    wait_for_true(page, f"{SHOWN_COUNT} === {len(ids)}")
    assert page.get_by_role("button", name="Show earlier messages").is_hidden()  # its room is the list's now
    assert abs(page.evaluate(on_screen) - seen_at) <= 1
