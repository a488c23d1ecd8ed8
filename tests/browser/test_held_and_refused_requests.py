"""The page while the server is slow to answer or refuses, in a real browser through nginx: a
request is held or answered by the test (Playwright's routing), the rest is the real stack.
What the user pressed takes effect on screen at once, and what the user wrote is never lost."""

import json
import threading

import pytest
from django.contrib.sessions.models import Session

from chatapp import services
from common.vocabulary import CancelledBy
from chatapp.models import Conversation, Generation, Message
from harness import waiting
from harness.page_probes import (alert_text, last_answer, send, wait_for_end, wait_for_handled,
                                 wait_for_streaming_text, wait_for_true)
from tests import factories
from tests.browser.conftest import PASSWORD, held, open_conversation, sign_in, sign_in_on_form

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def chat(page, stack_with_fake_upstream, user, upstream):
    sign_in(page, stack_with_fake_upstream, user)
    return page


def refuse(route, status: int = 400, code: str = "context_too_long") -> None:
    """Answers a held request as the server refuses one, before anything is stored."""
    route.fulfill(status=status, content_type="application/json",
                  body=json.dumps({"error": {"code": code, "message": "refused by the test"}}))


def shown(page, role: str) -> str:
    """The text of the last message of `role` on screen."""
    return page.locator(f'#messages .message[data-role="{role}"] .message-content').last \
        .inner_text()


def test_stop_ends_the_answer_at_once_while_the_stop_request_is_still_on_its_way(chat, upstream):
    upstream.script.chunks = ["Hello", ", ", "world"]
    upstream.script.stall_after = 2  # then quiet, as a model still thinking
    stops = held(chat, "**/api/generations/*/stop")
    send(chat, "Say hello")
    wait_for_streaming_text(chat, "Hello, ")

    chat.click("#stop")

    wait_for_true(chat, "document.body.dataset.streaming === 'false'", timeout_ms=10_000)
    answer = last_answer(chat)
    assert answer.get_attribute("data-status") == "stopped"
    assert answer.locator(".message-state").inner_text() == "Stopped"
    assert answer.locator(".message-content").inner_text().strip() == "Hello,"
    assert chat.locator("#stop").is_hidden()
    wait_for_handled(chat, lambda: len(stops) == 1, "the Stop sent")
    stops[0].continue_()  # the network recovers: the Stop arrives, and the record is what was seen
    waiting.wait_until(lambda: Message.objects.filter(role="assistant", status="stopped").exists(),
                       30, "the Stop recorded")
    assert Message.objects.get(role="assistant").content == "Hello, "


def test_stop_before_the_server_answers_ends_the_answer_at_once_and_the_model_once_the_request_arrives(
        chat, upstream):
    """The answer stayed "Writing…", Stop and Escape doing nothing, for as long as the request was
    held; the Stop waited for the answer's id."""
    upstream.script.head_held = threading.Event()  # the service slow to take the request
    upstream.script.stall_after = 1  # then writing on until stopped
    send(chat, "Say hello")
    waiting.wait_until(upstream.requested.is_set, 30, "the request at the inference service")

    chat.click("#stop")

    wait_for_true(chat, "document.body.dataset.streaming === 'false'", timeout_ms=10_000)
    assert last_answer(chat).get_attribute("data-status") == "stopped"
    upstream.script.head_held.set()  # taken at last: the answer starts, and the Stop reaches it
    assert upstream.hung_up.wait(30)
    waiting.wait_until(lambda: Generation.objects.filter(status="stopped").exists(), 30, "the Stop recorded")
    assert Generation.objects.get().cancelled_by == CancelledBy.USER
    assert Message.objects.get(role="assistant").content == ""  # the user saw nothing of it
    assert shown(chat, "user") == "Say hello"


def test_stop_before_a_request_that_is_then_refused_gives_the_words_back(chat):
    sends = held(chat, "**/api/conversations/*/messages")
    send(chat, "Say hello")
    wait_for_handled(chat, lambda: len(sends) == 1, "the message sent")

    chat.click("#stop")
    wait_for_true(chat, "document.body.dataset.streaming === 'false'", timeout_ms=10_000)
    refuse(sends[0], 429, "too_many_streams")

    wait_for_true(chat, "document.querySelector('#composer').value === 'Say hello'")
    assert chat.locator('#messages .message[data-role="user"]').count() == 0
    assert Message.objects.count() == 0


def test_signing_out_mid_answer_stops_it_before_the_session_ends(chat, upstream):
    """Sent with the logout, the Stop could land after it and be refused (401): the answer then
    ran on for its grace, holding the model, and ended as if its reader had gone."""
    upstream.script.chunks = ["Hello", ", ", "world"]
    upstream.script.stall_after = 2
    order = []
    chat.on("request", lambda request: order.append(("sent", request.url)))
    chat.on("requestfinished", lambda request: order.append(("answered", request.url)))
    stops = held(chat, "**/api/generations/*/stop")
    send(chat, "Say hello")
    wait_for_streaming_text(chat, "Hello, ")

    chat.click("#logout")
    wait_for_handled(chat, lambda: len(stops) == 1, "the Stop sent")
    stop_url = stops[0].request.url
    stops[0].continue_()
    chat.wait_for_selector("#login-form", state="visible")

    logouts = [i for i, (what, url) in enumerate(order) if what == "sent" and url.endswith("/logout")]
    assert logouts, "the sign-in form shows once the logout is answered"
    logout_sent = logouts[0]
    assert ("answered", stop_url) in order[:logout_sent], "the logout waits for the Stop's answer"
    waiting.wait_until(lambda: Generation.objects.filter(cancelled_by=CancelledBy.USER).exists(),
                       30, "the Stop recorded as the user's")
    assert not Session.objects.exists()


def test_signing_out_in_one_tab_hides_the_conversations_in_the_others_and_signing_in_shows_them(
        chat, user):
    """The cookie is the browser's, but each tab's view was its own: after signing out in one tab
    (on a shared computer, say), another still showed the open conversation and the whole list
    until its next request, and after someone else signed in it showed them under the first name."""
    factories.message(factories.conversation(owner=user, title="Medical notes"), content="private")
    chat.reload()
    chat.wait_for_selector('#conversation-list li:has-text("Medical notes")')
    other_tab = chat.context.new_page()
    other_tab.goto(chat.url.split("#")[0])
    other_tab.wait_for_selector("#composer")

    other_tab.click("#logout")

    chat.wait_for_selector("#login-form", state="visible")
    assert chat.locator("#conversation-list li").count() == 0
    stranger = factories.user(password=PASSWORD)
    sign_in_on_form(other_tab, stranger)
    chat.wait_for_selector("#composer")
    wait_for_true(chat, f"document.querySelector('#user-name').textContent === '{stranger.username}'")
    assert chat.locator('#conversation-list li:has-text("Medical notes")').count() == 0


def test_a_sign_out_that_did_not_reach_the_server_says_the_browser_may_still_be_signed_in(chat):
    """The sign-in form showed as after any sign-out, while the session lived on at the server:
    on a shared computer, the next person's reload opened the first person's conversations."""
    chat.route("**/api/auth/logout", lambda route: route.abort())

    chat.click("#logout")

    chat.wait_for_selector("#login-error:not([hidden])")
    assert "may still be signed in" in chat.locator("#login-error").inner_text()
    assert Session.objects.exists()


def test_a_message_refused_after_the_user_opened_another_conversation_is_named_and_waits_there(
        chat, user):
    first = factories.conversation(owner=user, title="Trip plans")
    second = factories.conversation(owner=user, title="Recipes")
    chat.reload()
    open_conversation(chat, first)
    sends = held(chat, f"**/api/conversations/{first.pk}/messages")
    send(chat, "my carefully written long question")
    wait_for_handled(chat, lambda: len(sends) == 1, "the message sent")

    open_conversation(chat, second)
    refuse(sends[0])

    assert "“Trip plans”" in alert_text(chat)
    assert "too long for the model" in alert_text(chat)
    # Not in another conversation's composer, where Send would post it there.
    assert chat.input_value("#composer") == ""
    open_conversation(chat, first)
    assert chat.input_value("#composer") == "my carefully written long question"


def writing_in_notes(chat, user, words: str):
    """Two conversations, "Notes" (one question asked) and "Other"; Notes open, `words` typed in
    its composer."""
    notes = factories.conversation(owner=user, title="Notes")
    factories.message(notes, content="an earlier question")  # not empty: New makes another
    other = factories.conversation(owner=user, title="Other")
    chat.reload()
    open_conversation(chat, notes)
    chat.fill("#composer", words)
    return notes, other


def session_ended_at_the_server(chat, conversation) -> None:
    """The session ends at the server (expired, or signed out elsewhere); the page learns it at
    its next request, opening `conversation`, and shows the sign-in form."""
    Session.objects.all().delete()
    chat.click(f'#conversation-list li[data-conversation-id="{conversation.pk}"] .conversation-open')
    chat.wait_for_selector("#login-form", state="visible")


def test_words_being_written_come_back_in_the_composer_of_their_conversation_after_a_reload(chat, user):
    notes, other = writing_in_notes(chat, user, "a long question I was still writing")

    chat.reload()
    wait_for_true(chat, "document.getElementById('conversation-title').textContent === 'Notes'")

    assert chat.input_value("#composer") == "a long question I was still writing"
    chat.fill("#composer", "")
    open_conversation(chat, other)
    open_conversation(chat, notes)
    assert chat.input_value("#composer") == "", "given back once"


def test_words_being_written_stay_with_their_conversation_when_another_is_opened(chat, user):
    notes, other = writing_in_notes(chat, user, "half a question for the notes")

    open_conversation(chat, other)
    assert chat.input_value("#composer") == "", "Send would post it into the other conversation"
    chat.fill("#composer", "words for the other one")
    open_conversation(chat, notes)
    assert chat.input_value("#composer") == "half a question for the notes"
    chat.click("#new-conversation")
    wait_for_true(chat, f"/^#\\/c\\/\\d+$/.test(location.hash) && location.hash !== '#/c/{notes.pk}'"
                        f" && location.hash !== '#/c/{other.pk}'")
    assert chat.input_value("#composer") == ""
    open_conversation(chat, other)
    assert chat.input_value("#composer") == "words for the other one"


def test_a_rewrite_under_way_in_a_messages_editor_comes_back_after_a_reload_and_another_conversation(
        chat, user):
    notes, other = writing_in_notes(chat, user, "and a new question")
    chat.click('#messages .message[data-role="user"] .edit')
    chat.fill(".edit-input", "an earlier question, put better")

    chat.reload()
    wait_for_true(chat, "document.getElementById('conversation-title').textContent === 'Notes'")
    chat.wait_for_selector(".edit-input")
    assert chat.input_value(".edit-input") == "an earlier question, put better"
    assert chat.input_value("#composer") == "and a new question"
    chat.fill(".edit-input", "an earlier question, put better still")
    open_conversation(chat, other)
    open_conversation(chat, notes)
    chat.wait_for_selector(".edit-input")
    assert chat.input_value(".edit-input") == "an earlier question, put better still"
    assert chat.input_value("#composer") == "and a new question"


def test_words_written_on_a_blank_page_stay_in_the_composer_when_new_conversation_is_pressed(chat):
    """The blank page is a new conversation already: New created one and moved there, and the
    words went with the blank page, kept for it out of sight, the composer emptied."""
    chat.fill("#composer", "a question I was writing")

    chat.click("#new-conversation")
    wait_for_true(chat, "/^#\\/c\\/\\d+$/.test(location.hash)")

    assert chat.input_value("#composer") == "a question I was writing"


def test_words_being_written_stay_in_the_composer_when_their_conversation_is_deleted(chat, user):
    notes, _ = writing_in_notes(chat, user, "a question worth keeping")

    chat.once("dialog", lambda dialog: dialog.accept())
    chat.click(f'li[data-conversation-id="{notes.pk}"] .conversation-delete')
    wait_for_true(chat, "document.querySelector('#conversation-title').textContent === 'New conversation'")

    assert chat.input_value("#composer") == "a question worth keeping"  # Send starts a new one with them


def test_words_kept_for_a_conversation_deleted_elsewhere_go_to_a_new_conversation_when_found_gone(
        chat, user):
    notes, other = writing_in_notes(chat, user, "words for the notes")
    open_conversation(chat, other)

    services.conversation_delete(conversation=notes)  # from another tab or device
    chat.click(f'li[data-conversation-id="{notes.pk}"] .conversation-open')
    wait_for_true(chat, "document.querySelector('#conversation-title').textContent === 'New conversation'")

    assert chat.input_value("#composer") == "words for the notes"


def deleted_in_another_tab(chat, conversation) -> None:
    """The user deletes `conversation` from a second tab of the same browser."""
    tab = chat.context.new_page()
    tab.goto(chat.url.split("#")[0])
    tab.once("dialog", lambda dialog: dialog.accept())
    tab.click(f'#conversation-list li[data-conversation-id="{conversation.pk}"] .conversation-delete')
    waiting.wait_until(lambda: Conversation.objects.get(pk=conversation.pk).deleted_at is not None,
                       10, "the conversation deleted")
    tab.close()


def test_a_message_sent_into_a_conversation_deleted_on_another_device_goes_to_a_new_one_with_its_words(
        chat, user):
    """The refusal was named, but the deleted conversation stayed on screen, its address too: each
    Send was refused again until the user found New conversation. (Deleted in another tab of this
    browser, the page is told at once: test_conversation_list.py.)"""
    notes, _ = writing_in_notes(chat, user, "")
    services.conversation_delete(conversation=notes)  # nothing tells this page

    send(chat, "are you there?")

    wait_for_true(chat, "document.querySelector('#conversation-title').textContent === 'New conversation'")
    assert chat.evaluate("location.hash") == ""
    assert chat.locator("#messages .message").count() == 0
    assert chat.input_value("#composer") == "are you there?"
    assert "deleted" in alert_text(chat)


def test_an_answer_whose_conversation_is_deleted_in_another_tab_ends_and_the_page_says_it_is_gone(
        chat, upstream):
    """The answer ended "Stopped" and its conversation stayed on screen, gone from the list only."""
    upstream.script.chunks = ["Hello", ", ", "world"]
    upstream.script.stall_after = 2
    send(chat, "Say hello")
    wait_for_streaming_text(chat, "Hello, ")

    deleted_in_another_tab(chat, Conversation.objects.get())

    wait_for_true(chat, "document.querySelector('#conversation-title').textContent === 'New conversation'")
    assert chat.evaluate("location.hash") == ""
    assert "deleted" in alert_text(chat)
    assert chat.locator("#stop").is_hidden()


def test_a_conversation_that_could_not_be_loaded_leaves_the_open_one_on_screen(chat, user):
    """Offline, a click on another conversation blanked the page to an empty "New conversation"
    (its address too), the words being written hidden with the conversation left: the next
    message would have started a conversation the user never asked for."""
    notes, other = writing_in_notes(chat, user, "half a thought")
    chat.route(f"**/api/conversations/{other.pk}/messages", lambda route: route.abort())

    chat.click(f'#conversation-list li[data-conversation-id="{other.pk}"] .conversation-open')

    assert alert_text(chat) == "Could not reach the server. Check your connection and try again."
    assert chat.locator("#conversation-title").inner_text() == "Notes"
    assert chat.evaluate("location.hash") == f"#/c/{notes.pk}"
    assert shown(chat, "user") == "an earlier question"
    assert chat.input_value("#composer") == "half a thought"
    assert chat.locator(f'li[data-conversation-id="{notes.pk}"] [aria-current="true"]').count() == 1


def test_words_being_written_when_the_session_ends_come_back_to_the_same_user_only(chat, user):
    stranger = factories.user(password=PASSWORD)
    notes, other = writing_in_notes(chat, user, "a long reply I was writing")

    session_ended_at_the_server(chat, other)
    sign_in_on_form(chat, stranger)
    assert chat.input_value("#composer") == "", "not for the next person at this computer"
    chat.click("#logout")
    chat.wait_for_selector("#login-form", state="visible")
    sign_in_on_form(chat, user)
    open_conversation(chat, notes)
    assert chat.input_value("#composer") == ""  # the stranger signed in: they were forgotten

    chat.fill("#composer", "written again")
    session_ended_at_the_server(chat, other)
    sign_in_on_form(chat, user)
    open_conversation(chat, notes)
    assert chat.input_value("#composer") == "written again"


def test_a_rejected_edit_keeps_the_editor_open_with_the_rewrite(chat, user):
    conversation = factories.conversation(owner=user, title="Questions")
    question = factories.message(conversation, content="short q")
    factories.message(conversation, role="assistant", content="an answer")
    edits = held(chat, f"**/api/messages/{question.pk}/edit")
    chat.reload()
    open_conversation(chat, conversation)

    chat.click('#messages .message[data-role="user"] .edit')
    chat.fill(".edit-input", "a much longer, carefully rewritten question")
    chat.press(".edit-input", "Enter")
    wait_for_handled(chat, lambda: len(edits) == 1, "the edit sent")
    refuse(edits[0])

    assert "too long for the model" in alert_text(chat)
    chat.wait_for_selector(".edit-input")
    assert chat.input_value(".edit-input") == "a much longer, carefully rewritten question"
    assert shown(chat, "user") == "short q"
    assert shown(chat, "assistant") == "an answer"


def test_a_rewrite_sent_while_an_answer_is_written_waits_in_its_open_editor(chat, user, upstream):
    upstream.script.chunks = ["Still", " writing", " never sent"]
    upstream.script.stall_after = 2  # then quiet, as a model still thinking
    writing_in_notes(chat, user, "")
    chat.click('#messages .message[data-role="user"] .edit')
    chat.fill(".edit-input", "an earlier question, put better")
    edits = held(chat, "**/api/messages/*/edit")
    send(chat, "a new question")
    wait_for_streaming_text(chat, "Still writing")

    chat.press(".edit-input", "Enter")

    assert chat.locator(".edit-input").count() == 1, "the editor stays open with the rewrite"
    assert chat.input_value(".edit-input") == "an earlier question, put better"
    assert chat.locator(".edit-save").is_disabled()  # as the composer's Send is
    chat.click("#stop")
    wait_for_true(chat, "document.body.dataset.streaming === 'false'", timeout_ms=10_000)
    assert chat.locator(".edit-save").is_enabled()
    assert edits == []


def test_a_message_the_server_could_not_be_reached_for_leaves_the_conversation_as_it_was(chat, user):
    notes, _ = writing_in_notes(chat, user, "")
    chat.route(f"**/api/conversations/{notes.pk}/messages", lambda route: route.abort("connectionrefused"))

    send(chat, "a question that never left")

    assert "reach" in alert_text(chat)
    wait_for_true(chat, "document.querySelectorAll('#messages .message').length === 1")
    assert shown(chat, "user") == "an earlier question"
    assert chat.input_value("#composer") == "a question that never left"
    assert chat.locator("#stop").is_hidden()


def test_a_message_refused_for_an_answer_begun_elsewhere_says_why_while_that_answer_is_followed(chat, user):
    notes, _ = writing_in_notes(chat, user, "")

    def begun_in_another_tab(route):
        answer = factories.message(notes, role="assistant", status="streaming", content="Meanwhile")
        factories.generation(answer, status="streaming")
        refuse(route, 409, "conversation_busy")

    chat.route(f"**/api/conversations/{notes.pk}/messages",
               lambda route: begun_in_another_tab(route) if route.request.method == "POST" else route.continue_())
    send(chat, "my question")

    wait_for_true(chat, "document.querySelector('#messages .message[data-role=assistant]')?.dataset.watched === 'true'")
    assert chat.locator("#alert").is_visible()
    assert "still being written" in chat.locator("#alert-text").inner_text()
    assert chat.input_value("#composer") == "my question"


def test_text_kept_to_hand_back_outlives_a_load_that_could_not_reach_the_server(chat):
    # As a page that went while its answer's stream was lost leaves it (kept_pieces.js).
    chat.evaluate("""sessionStorage.setItem("chatapp.piecesToHandBack",
        JSON.stringify({"7": [{"offset": 0, "text": "what the user saw", "proof": "p"}]}))""")
    chat.route("**/api/auth/session", lambda route: refuse(route, 502, "server_unreachable"))
    chat.reload()  # the web processes are down: nginx answers for them
    chat.wait_for_selector("#login-error", state="visible")

    chat.unroute("**/api/auth/session")
    handed_back = held(chat, "**/api/generations/*/recover")
    chat.reload()

    wait_for_handled(chat, lambda: len(handed_back) == 1, "the kept text handed back")
    assert json.loads(handed_back[0].request.post_data)["pieces"][0]["text"] == "what the user saw"
    handed_back[0].continue_()


def test_what_is_typed_while_a_new_conversation_is_created_stays_in_the_composer(chat):
    creations = held(chat, "**/api/conversations")
    send(chat, "first message")
    wait_for_handled(chat, lambda: len(creations) == 1, "the conversation asked for")
    chat.locator("#composer").press_sequentially(" and a second thought")
    creations[0].continue_()

    wait_for_end(chat)
    assert shown(chat, "user") == "first message"
    assert chat.input_value("#composer") == "and a second thought"


def test_a_message_sent_right_after_stop_waits_for_the_stopped_answer_instead_of_a_refusal(
        chat, upstream):
    upstream.script.chunks = ["Hello", ", ", "world"]
    upstream.script.stall_after = 2
    stops = held(chat, "**/api/generations/*/stop")
    send(chat, "Say hello")
    wait_for_streaming_text(chat, "Hello, ")
    chat.click("#stop")
    wait_for_true(chat, "document.body.dataset.streaming === 'false'", timeout_ms=10_000)
    wait_for_handled(chat, lambda: len(stops) == 1, "the Stop sent")
    upstream.script.stall_after = None

    # The server still writes the stopped answer until the Stop reaches it: a message sent now
    # would be refused (409 conversation_busy) were it not sent once that answer has ended.
    send(chat, "And again")
    stops[0].continue_()

    wait_for_true(chat, "document.querySelectorAll('#messages .message[data-role=\"assistant\"]')"
                        ".length === 2 && document.body.dataset.streaming === 'false'")
    assert chat.locator("#alert").is_hidden()
    assert shown(chat, "assistant") == "Hello, world"
    assert [m.status for m in Message.objects.filter(role="assistant").order_by("pk")] == [
        "stopped", "completed"]
