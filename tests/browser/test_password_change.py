"""A signed-in user changes their own password from the page's top bar, in a real browser through
nginx: a dialog that says what is wrong in sentences, keeps the keyboard's focus where it belongs,
closes on Escape, and announces the change; afterwards the new password signs in, the old one
does not, and another browser signed in before is signed out."""

import pytest
from django.contrib.sessions.models import Session

from chatapp.models import Generation

from harness.page_probes import send, wait_for_streaming_text, wait_for_true
from tests.browser.conftest import PASSWORD, sign_in, sign_in_on_form

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

NEW_PASSWORD = "a-brand-new-passphrase"
CHANGED = "Your password is changed. Other browsers and devices signed in to your account are signed out."


@pytest.fixture
def chat(page, stack_with_fake_upstream, user, upstream):
    sign_in(page, stack_with_fake_upstream, user)
    return page


def focused_id(page) -> str:
    return page.evaluate("document.activeElement.id")


def open_dialog(page) -> None:
    page.get_by_role("button", name="Change password").click()
    page.wait_for_selector("#password-dialog[open]")


def fill_dialog(page, old: str, new: str, repeated: str | None = None) -> None:
    page.fill("#password-old", old)
    page.fill("#password-new", new)
    page.fill("#password-repeat", new if repeated is None else repeated)
    page.click("#password-form [type=submit]")


def dialog_error(page) -> str:
    page.wait_for_selector("#password-error:not([hidden])")
    return page.locator("#password-error").inner_text()


def test_a_user_changes_the_password_from_the_page_and_signs_in_with_the_new_one_not_the_old(
        chat, chromium, stack_with_fake_upstream, user):
    elsewhere = chromium.new_context().new_page()
    sign_in(elsewhere, stack_with_fake_upstream, user)

    open_dialog(chat)
    opened_on = focused_id(chat)
    fill_dialog(chat, PASSWORD, NEW_PASSWORD)
    wait_for_true(chat, f"document.getElementById('announcer').textContent === {CHANGED!r}")

    assert opened_on == "password-old"
    assert not chat.locator("#password-dialog").is_visible()
    assert focused_id(chat) == "change-password"
    assert chat.locator("#password-changed").is_visible()
    chat.reload()
    chat.wait_for_selector("#composer")  # this browser is still signed in
    elsewhere.reload()
    elsewhere.wait_for_selector("#login-form")  # the other one is not
    assert elsewhere.locator("#login-form [name=username]").is_visible()
    elsewhere.context.close()

    chat.get_by_role("button", name="Sign out").click()
    chat.fill("#login-form [name=username]", user.username)
    chat.fill("#login-form [name=password]", PASSWORD)
    chat.click("#login-form [type=submit]")
    chat.wait_for_selector("#login-error:not([hidden])")
    assert chat.locator("#login-error").inner_text() == "That username and password don't match. Please try again."
    chat.fill("#login-form [name=password]", NEW_PASSWORD)
    chat.click("#login-form [type=submit]")
    chat.wait_for_selector("#composer")
    # The old password's refused sign-in is the one failure the browser reports, and no script failed.
    assert chat.console_errors == ["Failed to load resource: the server responded with a status of 400 (Bad Request)"]


def test_the_dialog_says_what_is_wrong_in_sentences_on_the_field_to_mend(chat, user):
    open_dialog(chat)

    fill_dialog(chat, PASSWORD, NEW_PASSWORD, repeated=NEW_PASSWORD + "x")
    assert "differ" in dialog_error(chat) and focused_id(chat) == "password-repeat"

    fill_dialog(chat, "not my password", NEW_PASSWORD)
    wait_for_true(chat, "document.getElementById('password-error').textContent.startsWith('That is not your')")
    assert focused_id(chat) == "password-old"
    assert chat.locator("#password-old").get_attribute("aria-invalid") == "true"

    fill_dialog(chat, PASSWORD, "12345")
    wait_for_true(chat, "document.getElementById('password-error').textContent.startsWith('That new password')")
    assert "This password is too short." in dialog_error(chat)
    assert "entirely numeric" in dialog_error(chat)
    assert focused_id(chat) == "password-new"
    user.refresh_from_db()
    assert user.check_password(PASSWORD)


def test_escape_closes_the_dialog_back_to_its_button_with_nothing_typed_left(chat):
    open_dialog(chat)
    chat.fill("#password-old", "half typed")

    chat.keyboard.press("Escape")
    chat.wait_for_selector("#password-dialog:not([open])", state="attached")
    wait_for_true(chat, "document.activeElement.id === 'change-password'")
    open_dialog(chat)

    assert chat.locator("#password-old").input_value() == ""
    assert chat.locator("#password-error").is_hidden()


def test_escape_in_the_dialog_closes_it_and_stops_no_answer_being_written(chat, upstream):
    upstream.script.chunks = ["Hello", ", ", "world"]
    upstream.script.stall_after = 2  # then quiet: the answer is being written until stopped
    stops = []
    chat.on("request", lambda r: r.method == "POST" and r.url.endswith("/stop") and stops.append(r.url))
    send(chat, "Say hello")
    wait_for_streaming_text(chat, "Hello, ")
    open_dialog(chat)
    chat.locator("#password-cancel").focus()  # a button: Escape from it would otherwise be a Stop

    chat.keyboard.press("Escape")
    chat.wait_for_selector("#password-dialog:not([open])", state="attached")

    assert chat.evaluate("document.body.dataset.streaming") == "true"
    assert stops == []


def test_a_session_that_ended_meanwhile_shows_the_sign_in_form_not_the_dialog(chat, user):
    open_dialog(chat)
    Session.objects.all().delete()  # as the user's sign-out in another tab, say

    fill_dialog(chat, PASSWORD, NEW_PASSWORD)
    chat.wait_for_selector("#login-form")

    assert not chat.locator("#password-dialog").is_visible()
    assert chat.locator("#login-error").inner_text() == "Your session ended. Please sign in again."
    sign_in_on_form(chat, user)
    user.refresh_from_db()
    assert user.check_password(PASSWORD)


def test_a_password_change_here_ends_the_answer_another_browser_is_writing_and_shows_it_the_sign_in_form(
        chat, chromium, stack_with_fake_upstream, user, upstream):
    upstream.script.chunks = ["Hello", ", ", "world"]
    upstream.script.stall_after = 2  # then quiet: the answer is being written until something ends it
    elsewhere = chromium.new_context().new_page()
    sign_in(elsewhere, stack_with_fake_upstream, user)
    send(elsewhere, "Say hello")
    wait_for_streaming_text(elsewhere, "Hello, ")

    open_dialog(chat)
    fill_dialog(chat, PASSWORD, NEW_PASSWORD)
    elsewhere.wait_for_selector("#login-form")

    assert elsewhere.locator("#login-error").inner_text() == (
        "This browser was signed out (a sign-out, or the password was changed). Please sign in again.")
    answer = Generation.objects.get(user=user)  # written before the stream's last event
    assert answer.status == "stopped" and answer.cancelled_by == "signed_out"
    elsewhere.context.close()
