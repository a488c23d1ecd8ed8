"""A page that has not seen what another tab or device added to its conversation destroys none
of it: a Regenerate or an edit carries the last message the page shows, and the server refuses
one whose conversation has moved on since (409 conversation_changed). The page then shows the
conversation as stored, and an edit's rewrite waits in its editor."""

import json

import pytest

from chatapp.models import Message
from harness.page_probes import alert_text, last_answer, send, wait_for_end, wait_for_true
from tests.browser.conftest import sign_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SHOWN = ("[...document.querySelectorAll('#messages .message')]"
         ".map((m) => m.dataset.role + ': ' + m.querySelector('.message-content').textContent.trim())")
EVERY_MESSAGE = ["user: q1", "assistant: first answer", "user: q2", "assistant: second answer"]
SHOWS_EVERY_MESSAGE = (f"JSON.stringify({SHOWN}) === "
                       f"{json.dumps(json.dumps(EVERY_MESSAGE, separators=(',', ':')))}")


@pytest.fixture
def stale_tab(page, stack_with_fake_upstream, user, upstream):
    """`page` shows q1 and its answer; a second tab of the same browser has since asked q2 and
    been answered, which `page` has not loaded."""
    sign_in(page, stack_with_fake_upstream, user)
    upstream.script.chunks = ["first answer"]
    send(page, "q1")
    wait_for_end(page)
    other = page.context.new_page()
    other.goto(page.url)
    other.wait_for_selector('#messages .message[data-role="assistant"]')
    upstream.script.chunks = ["second answer"]
    send(other, "q2")
    wait_for_end(other)
    assert other.evaluate(SHOWN) == EVERY_MESSAGE
    assert page.evaluate(SHOWN) == EVERY_MESSAGE[:2]
    upstream.requests.clear()
    return page


def stored() -> list[str]:
    return [f"{role}: {content}" for role, content in Message.objects.order_by("pk").values_list("role", "content")]


def test_regenerate_in_a_tab_that_has_not_seen_the_newer_answer_replaces_nothing_and_shows_it(stale_tab, upstream):
    upstream.script.chunks = ["regenerated"]
    last_answer(stale_tab).locator(".regenerate").click()

    assert "changed in another tab" in alert_text(stale_tab)
    wait_for_true(stale_tab, SHOWS_EVERY_MESSAGE)
    assert stored() == EVERY_MESSAGE
    assert upstream.requests == []


def test_an_edit_in_a_tab_that_has_not_seen_later_messages_deletes_none_and_keeps_the_rewrite(stale_tab, upstream):
    upstream.script.chunks = ["after the edit"]
    question = stale_tab.locator('#messages .message[data-role="user"]').first
    question.locator(".edit").click()
    question.locator(".edit-input").fill("q1 rewritten")
    question.locator(".edit-save").click()

    assert "changed in another tab" in alert_text(stale_tab)
    wait_for_true(stale_tab, SHOWS_EVERY_MESSAGE)
    assert stored() == EVERY_MESSAGE
    assert upstream.requests == []
    question = stale_tab.locator('#messages .message[data-role="user"]').first
    assert question.locator(".edit-input").input_value() == "q1 rewritten"


def continued(tab, upstream, text: str) -> None:
    """`tab` continues the answer it shows, cut short at its length limit, with `text`."""
    upstream.script.chunks, upstream.script.finish_reason = [text], "stop"
    last_answer(tab).locator(".continue").click()
    wait_for_end(tab)


@pytest.fixture
def cut_short(page, stack_with_fake_upstream, user, upstream):
    """`page` shows q1 and its answer, "cut short" at its length limit."""
    sign_in(page, stack_with_fake_upstream, user)
    upstream.script.chunks, upstream.script.finish_reason = ["cut short"], "length"
    send(page, "q1")
    wait_for_end(page)
    return page


def test_regenerate_in_a_tab_that_has_not_seen_an_answer_continued_elsewhere_keeps_the_continuation(
        cut_short, upstream):
    # A Continue writes on in the same message, keeping its id: the id alone does not tell the
    # stale tab's Regenerate that the answer now holds text it never showed.
    page = cut_short
    other = page.context.new_page()
    other.goto(page.url)
    other.wait_for_selector('#messages .message[data-role="assistant"] .continue')
    continued(other, upstream, " and continued")
    assert stored() == ["user: q1", "assistant: cut short and continued"]
    upstream.requests.clear()

    upstream.script.chunks = ["regenerated"]
    last_answer(page).locator(".regenerate").click()

    assert "changed in another tab" in alert_text(page)
    wait_for_true(page, f"JSON.stringify({SHOWN}) === "
                        + json.dumps(json.dumps(["user: q1", "assistant: cut short and continued"],
                                                separators=(",", ":"))))
    assert stored() == ["user: q1", "assistant: cut short and continued"]
    assert upstream.requests == []


def test_the_tab_that_continued_an_answer_regenerates_it_without_being_refused(cut_short, upstream):
    # It read the answer's new length back at the continuation's end: it is not a stale page.
    page = cut_short
    continued(page, upstream, " and continued 🙂")
    wait_for_true(page, "!document.querySelector('#messages .message[data-role=\"assistant\"] .continue:not([hidden])')")

    upstream.script.chunks = ["regenerated"]
    last_answer(page).locator(".regenerate").click()
    wait_for_end(page)

    assert stored() == ["user: q1", "assistant: regenerated"]
    assert page.locator("#alert").is_hidden()
