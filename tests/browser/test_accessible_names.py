"""What a screen reader hears the controls called, in a real browser (Chromium's accessibility tree,
as Playwright's roles and names read it): each names what it acts on, and only what can be used
is there to be found."""

import pytest

from harness.page_probes import send, wait_for_end, wait_for_true
from tests import factories
from tests.browser.conftest import sign_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def chat(page, stack_with_fake_upstream, user, upstream):
    sign_in(page, stack_with_fake_upstream, user)
    return page


def button_names(page, within: str) -> list[str]:
    return [b.get_attribute("aria-label") or b.inner_text()
            for b in page.locator(within).get_by_role("button").all()]


def test_each_conversations_rename_and_delete_name_the_conversation_and_follow_a_rename(chat, user):
    for title in ["Trip to Lisbon", "Tax return"]:
        factories.conversation(owner=user, title=title)
    chat.reload()
    chat.wait_for_selector("#conversation-list li:nth-child(2)")

    named = button_names(chat, "#conversation-list")
    chat.get_by_role("button", name="Rename “Tax return”").click()
    chat.fill(".conversation-title-input", "Taxes 2026")
    chat.press(".conversation-title-input", "Enter")
    wait_for_true(chat, "document.getElementById('announcer').textContent === 'Renamed to Taxes 2026'")

    assert named == ["Tax return", "Rename “Tax return”", "Delete “Tax return”",
                     "Trip to Lisbon", "Rename “Trip to Lisbon”", "Delete “Trip to Lisbon”"]
    assert chat.get_by_role("button", name="Delete “Taxes 2026”").count() == 1
    assert chat.get_by_role("button", name="Delete “Tax return”").count() == 0


def test_the_sign_in_page_offers_no_link_to_the_message_box_it_does_not_show(page, stack_with_fake_upstream):
    page.goto(stack_with_fake_upstream + "/")
    page.wait_for_selector("#login-form")

    assert page.get_by_role("link").count() == 0
    page.keyboard.press("Shift+Tab")  # from the username box, back past the start of the form
    assert page.evaluate("document.activeElement.closest('a')") is None


def test_the_sign_in_form_is_the_pages_main_content(page, stack_with_fake_upstream):
    """A screen reader's "main" key goes to the form, and nothing on the page lies outside a landmark."""
    page.goto(stack_with_fake_upstream + "/")
    page.wait_for_selector("#login-form")

    assert page.get_by_role("main").count() == 1
    assert page.get_by_role("main").get_by_role("button", name="Sign in").count() == 1


def test_an_answer_is_named_as_being_written_until_it_ends_and_after_a_reload(chat, upstream):
    """Every answer was "Assistant answered", the one still being written too."""
    upstream.script.stall_after = 2  # open until stopped
    send(chat, "Tell me about Lisbon")
    chat.wait_for_selector('#messages .message[data-role="assistant"] .message-content:has-text("Hello,")')
    writing = [a.get_attribute("aria-label") for a in chat.get_by_role("article").all()]

    chat.click("#stop")
    wait_for_end(chat)
    ended = [a.get_attribute("aria-label") for a in chat.get_by_role("article").all()]
    chat.reload()
    chat.wait_for_selector('#messages .message[data-role="assistant"][data-status="stopped"]')
    reloaded = [a.get_attribute("aria-label") for a in chat.get_by_role("article").all()]

    assert writing == ["You said", "Assistant is answering"]
    assert ended == reloaded == ["You said", "Assistant answered"]
