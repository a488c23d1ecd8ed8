"""Every answer seen live and labelled truly, in a real browser through nginx: a second page
follows an answer it did not start, an answer goes on while the user is in another
conversation, a stalled connection is reported, and each way an answer ends reads the same
after a reload."""

import time

import pytest

from chatapp.models import Conversation, Generation, Message
from harness import waiting

from harness.page_probes import last_answer, send, wait_for_end, wait_for_true
from tests.browser.conftest import running_stack, sign_in
from tests.fakes.stalling_proxy import stalling_proxy

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

HEARTBEAT_S = 1.0  # the stalled stack's CHAT_HEARTBEAT_SECONDS: a stall is 2 s of silence
# Long enough to look away and back, or open a second page, while it is still being written.
SLOW_ANSWER = [f"w{i} " for i in range(120)]
SLOW_INTERVAL_S = 0.05
STREAMING_ANSWER = '#messages .message[data-role="assistant"][data-status="streaming"]'


@pytest.fixture
def chat(page, stack_with_fake_upstream, user, upstream):
    sign_in(page, stack_with_fake_upstream, user)
    return page


@pytest.fixture
def second_page(chromium):
    """Another device: its own browser context, so its own session and connections."""
    context = chromium.new_context(viewport={"width": 1200, "height": 800})
    yield context.new_page()
    context.close()


@pytest.fixture(scope="module")
def stalling_stack(django_db_setup, django_db_blocker, fake_upstream, tmp_path_factory):
    """The stack with a short heartbeat, reached through a proxy that can stall its streams."""
    with running_stack(fake_upstream.url, tmp_path_factory.mktemp("stalling"),
                       CHAT_HEARTBEAT_SECONDS=HEARTBEAT_S) as url, stalling_proxy(url) as proxy:
        yield proxy


def slow_answer(upstream) -> None:
    upstream.script.chunks = SLOW_ANSWER
    upstream.script.interval_s = SLOW_INTERVAL_S


def shown_text(page) -> str:
    return last_answer(page).locator(".message-content").inner_text()


def state_of(page) -> str:
    return last_answer(page).locator(".message-state").inner_text()


def actions_of(page) -> dict[str, bool]:
    answer = last_answer(page)
    return {name: answer.locator(f".{name}").is_visible() for name in ("regenerate", "retry", "continue")}


def stored_answer() -> Message:
    return Message.objects.filter(role="assistant").last()


def wait_for_stored_end() -> Generation:
    """An answer not stored yet has not ended either: a Stop pressed before the server named the
    answer ends it on screen at once, while its request may still be on its way."""
    waiting.wait_until(lambda: getattr(stored_answer(), "status", "streaming") != "streaming", 30,
                       "the answer's final write")
    return Generation.objects.get(message=stored_answer())


def open_on_another_device(page, base_url: str, user, conversation_id: int) -> None:
    """Signs in on another device and picks the conversation from the list."""
    sign_in(page, base_url, user)
    page.click(f'#conversation-list li[data-conversation-id="{conversation_id}"] .conversation-open')


def wait_for_writing_mark(page, conversation_id: int, is_writing: bool) -> None:
    item = f"#conversation-list li[data-conversation-id=\"{conversation_id}\"]"
    wait_for_true(page, f"document.querySelector('{item}')?.dataset.writing === '{str(is_writing).lower()}'")


def wait_for_growth(page, beyond: int) -> None:
    wait_for_true(page, f"(document.querySelector('{STREAMING_ANSWER} .message-content')"
                        f"?.textContent.length ?? 0) > {beyond}")


# --- another page follows ---
def follow_on_second_page(chat, second_page, user, upstream) -> None:
    """A slow answer on the first page, then the second opens it and sees it grow."""
    slow_answer(upstream)
    send(chat, "count slowly")
    wait_for_true(chat, "window.chatappStats.paints >= 3")
    base_url = chat.url.split("#")[0].rstrip("/")
    open_on_another_device(second_page, base_url, user, Conversation.objects.get().pk)
    second_page.wait_for_selector(STREAMING_ANSWER)
    wait_for_growth(second_page, beyond=len(shown_text(second_page)))


def test_a_second_page_opened_mid_answer_follows_it_to_the_end_and_settles(chat, second_page, user, upstream):
    follow_on_second_page(chat, second_page, user, upstream)
    wait_for_end(second_page)
    wait_for_end(chat)

    stored = stored_answer()
    assert last_answer(second_page).get_attribute("data-status") == "completed"
    assert state_of(second_page) == ""
    assert shown_text(second_page).split() == stored.content.split() == [w.strip() for w in SLOW_ANSWER]
    assert shown_text(chat).split() == stored.content.split()


def test_a_second_page_can_stop_the_answer_it_follows_and_both_keep_what_it_saw(chat, second_page, user, upstream):
    follow_on_second_page(chat, second_page, user, upstream)

    second_page.click("#stop")
    wait_for_end(second_page)
    wait_for_end(chat)
    generation = wait_for_stored_end()
    seen = shown_text(second_page)

    assert (generation.status, generation.cancelled_by) == ("stopped", "user")
    assert seen.split() == stored_answer().content.split()
    assert state_of(second_page) == "Stopped"
    # The page that started it shows the stored record: the text the watcher saw, stopped.
    wait_for_true(chat, "[...document.querySelectorAll('#messages .message')].at(-1).dataset.cancelledBy === 'user'")
    assert shown_text(chat).split() == seen.split()
    assert state_of(chat) == "Stopped"


# --- the user looks elsewhere ---
def test_an_answer_goes_on_while_the_user_is_in_another_conversation_and_is_live_on_return(chat, upstream):
    slow_answer(upstream)
    send(chat, "count slowly")
    wait_for_true(chat, "window.chatappStats.paints >= 3")
    conversation = Conversation.objects.get()
    item = chat.locator(f'#conversation-list li[data-conversation-id="{conversation.pk}"]')
    wait_for_writing_mark(chat, conversation.pk, True)

    chat.click("#new-conversation")
    wait_for_true(chat, f"!location.hash.endsWith('/{conversation.pk}')")
    assert item.get_attribute("data-writing") == "true"
    assert item.locator(".conversation-writing").is_visible()
    assert Generation.objects.get().status == "streaming"

    item.locator(".conversation-open").click()
    chat.wait_for_selector(STREAMING_ANSWER)
    wait_for_growth(chat, beyond=len(shown_text(chat)))
    wait_for_end(chat)

    generation = wait_for_stored_end()
    assert (generation.status, generation.cancelled_by) == ("completed", "")
    assert shown_text(chat).split() == stored_answer().content.split() == [w.strip() for w in SLOW_ANSWER]
    wait_for_writing_mark(chat, conversation.pk, False)


# --- a stalled connection ---
def test_a_stalled_connection_is_reported_within_two_heartbeats_and_keeps_the_text(
        page, stalling_stack, user, upstream):
    slow_answer(upstream)
    sign_in(page, stalling_stack.url, user)
    send(page, "count slowly")
    wait_for_true(page, "window.chatappStats.paints >= 3")

    assert stalling_stack.stall() == 1
    stalled_at = time.monotonic()
    page.wait_for_selector('#messages .message[data-error="connection_stalled"]', timeout=10_000)
    took = time.monotonic() - stalled_at

    # Two heartbeats of silence, plus a frame and Playwright's poll to see it.
    assert took < 2 * HEARTBEAT_S + 1.0
    assert state_of(page).startswith("Interrupted: the connection stalled")
    assert shown_text(page).startswith("w0 w1")
    assert actions_of(page)["retry"]
    assert page.evaluate("document.body.dataset.streaming") == "false"


def test_a_stalled_watch_is_reported_and_retry_follows_the_answer_again(
        page, second_page, stalling_stack, user, upstream):
    upstream.script.chunks = [f"w{i} " for i in range(200)]  # 10 s: time to stall and retry
    upstream.script.interval_s = SLOW_INTERVAL_S
    sign_in(page, stalling_stack.target_url, user)  # the page that asks goes around the proxy
    send(page, "count slowly")
    wait_for_true(page, "window.chatappStats.paints >= 3")
    open_on_another_device(second_page, stalling_stack.url, user, Conversation.objects.get().pk)
    second_page.wait_for_selector(STREAMING_ANSWER)
    wait_for_growth(second_page, beyond=len(shown_text(second_page)))

    assert stalling_stack.stall() == 1  # the watch stream only
    second_page.wait_for_selector('#messages .message[data-error="connection_stalled"]',
                                  timeout=int((2 * HEARTBEAT_S + 1.0) * 1000))
    assert state_of(second_page).startswith("The connection stalled while following this answer")
    assert Generation.objects.get().status == "streaming"  # the answer itself goes on

    last_answer(second_page).locator(".retry").click()
    second_page.wait_for_selector(STREAMING_ANSWER)
    wait_for_end(second_page)
    wait_for_end(page)
    assert last_answer(second_page).get_attribute("data-status") == "completed"
    assert shown_text(second_page).split() == stored_answer().content.split() == shown_text(page).split()


def test_an_answer_kept_alive_by_pings_alone_is_not_a_stall(page, stalling_stack, user, upstream):
    upstream.script.first_delay_s = 4 * HEARTBEAT_S  # only `: ping` for four heartbeats
    sign_in(page, stalling_stack.url, user)
    send(page, "think first")
    wait_for_end(page)

    assert last_answer(page).get_attribute("data-status") == "completed"
    assert shown_text(page) == "Hello, world!"


# --- honest labels ---
def end_completed(page, upstream):
    send(page, "hello")
    wait_for_end(page)


def end_stopped_by_the_user(page, upstream):
    slow_answer(upstream)
    send(page, "count slowly")
    wait_for_true(page, "window.chatappStats.paints >= 3")
    page.click("#stop")
    wait_for_end(page)


def end_interrupted_by_leaving_the_page(page, upstream):
    slow_answer(upstream)
    send(page, "count slowly")
    wait_for_true(page, "window.chatappStats.paints >= 3")
    address = page.url
    page.goto("about:blank")  # the tab leaves: its connection closes under the answer
    wait_for_stored_end()
    page.goto(address)


def end_truncated(page, upstream):
    upstream.script.finish_reason = "length"
    send(page, "go on and on")
    wait_for_end(page)


def end_failed(page, upstream):
    upstream.script.chunks = ["Partial ", "answer ", "that ", "breaks"]
    upstream.script.crash_after = 2
    send(page, "please crash")
    wait_for_end(page)


NO_ACTIONS = {"regenerate": False, "retry": False, "continue": False}
ENDINGS = {  # how it ends: (label, actions, stored status, stored cancelled_by)
    end_completed: ("", {**NO_ACTIONS, "regenerate": True}, "completed", ""),
    end_stopped_by_the_user: ("Stopped", {**NO_ACTIONS, "regenerate": True}, "stopped", "user"),
    end_interrupted_by_leaving_the_page: ("Interrupted", {**NO_ACTIONS, "retry": True}, "stopped", "client_gone"),
    end_truncated: ("Cut short at the length limit", {**NO_ACTIONS, "regenerate": True, "continue": True},
                    "truncated", ""),
    end_failed: ("Failed", {**NO_ACTIONS, "retry": True}, "failed", ""),
}


@pytest.mark.parametrize("end", ENDINGS, ids=lambda end: end.__name__.removeprefix("end_"))
def test_each_way_an_answer_ends_reads_the_same_after_a_reload(chat, upstream, end):
    label, actions, status, cancelled_by = ENDINGS[end]
    end(chat, upstream)
    chat.wait_for_selector('#messages .message[data-role="assistant"]:not([data-status="streaming"])')
    live = (state_of(chat), actions_of(chat))

    generation = wait_for_stored_end()
    chat.reload()
    chat.wait_for_selector('#messages .message[data-role="assistant"]')

    assert (generation.status, generation.cancelled_by) == (status, cancelled_by)
    assert last_answer(chat).get_attribute("data-status") == status
    assert state_of(chat) == label
    assert actions_of(chat) == actions
    # While it ended the page said the same (a failure adds its reason after the word).
    assert live[0].startswith(label) and live[1] == actions


def test_a_continuation_that_breaks_leaves_what_it_wrote_to_be_continued_again_after_a_reload(chat, upstream):
    end_truncated(chat, upstream)
    upstream.script.finish_reason = "stop"
    upstream.script.chunks, upstream.script.crash_after = [" and", " more", " lost"], 2
    last_answer(chat).locator(".continue").click()
    wait_for_end(chat)  # the page read the continuation's `done`: its rows were final before it
    live = (state_of(chat), actions_of(chat))

    generation = Generation.objects.filter(message=stored_answer()).order_by("pk").last()
    chat.reload()
    chat.wait_for_selector('#messages .message[data-role="assistant"]')

    label = "Cut short where continuing it failed"
    actions = {**NO_ACTIONS, "regenerate": True, "continue": True}
    assert (generation.status, stored_answer().status) == ("failed", "truncated")
    assert last_answer(chat).get_attribute("data-status") == "truncated"
    assert shown_text(chat) == "Hello, world! and more"
    assert (state_of(chat), actions_of(chat)) == (label, actions)
    assert live[0].startswith(f"{label}: ") and live[1] == actions


def test_enter_then_escape_before_the_first_token_is_recorded_as_the_users_stop(chat, upstream):
    upstream.script.first_delay_s = 2.0
    chat.click("#new-conversation")
    wait_for_true(chat, "location.hash !== ''")
    chat.fill("#composer", "never mind")
    chat.press("#composer", "Enter")
    chat.keyboard.press("Escape")
    wait_for_end(chat)

    generation = wait_for_stored_end()
    assert (generation.status, generation.cancelled_by) == ("stopped", "user")
    assert state_of(chat) == "Stopped"
    assert shown_text(chat) == ""
