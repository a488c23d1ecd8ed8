"""Where the keyboard's focus goes in a real browser, for someone who uses no mouse: after each
action it is on a control that is shown, never dropped to the page itself."""

import pytest

from harness.page_probes import wait_for_handled, wait_for_true
from tests import factories
from tests.browser.conftest import held, sign_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

FOCUS_IS_SHOWN = """(() => { const el = document.activeElement;
  return el !== document.body && el.checkVisibility({ visibilityProperty: true }); })()"""


@pytest.fixture
def phone(page, stack_with_fake_upstream, user):
    page.set_viewport_size({"width": 390, "height": 800})
    sign_in(page, stack_with_fake_upstream, user)
    return page


def test_on_a_phone_a_conversation_picked_from_the_drawer_leaves_the_focus_shown_while_it_loads_and_if_it_fails(
        phone, user):
    conversation = factories.conversation(owner=user, title="Picked")
    phone.reload()
    phone.click("#toggle-sidebar")
    loads = held(phone, f"**/api/conversations/{conversation.pk}/messages", method="GET")

    phone.focus(f'li[data-conversation-id="{conversation.pk}"] .conversation-open')
    phone.keyboard.press("Enter")  # the drawer closes at once; the conversation is on its way
    wait_for_handled(phone, lambda: len(loads) == 1, "the conversation's messages asked for")
    while_loading = phone.evaluate(FOCUS_IS_SHOWN)
    loads[0].abort()  # not reached: the conversation on screen stays, and the alert says why
    phone.wait_for_selector("#alert:not([hidden])")

    assert while_loading, "the focus was left in the closed drawer"
    assert phone.evaluate(FOCUS_IS_SHOWN)


def test_on_a_phone_new_conversation_pressed_in_the_drawer_leaves_the_focus_shown_while_it_is_made_and_if_it_fails(
        phone):
    phone.click("#toggle-sidebar")
    creations = held(phone, "**/api/conversations", method="POST")

    phone.focus("#new-conversation")
    phone.keyboard.press("Enter")
    wait_for_handled(phone, lambda: len(creations) == 1, "the new conversation asked for")
    while_made = phone.evaluate(FOCUS_IS_SHOWN)
    creations[0].abort()
    phone.wait_for_selector("#alert:not([hidden])")

    assert while_made, "the focus was left in the closed drawer"
    assert phone.evaluate(FOCUS_IS_SHOWN)
