"""An answer outlives its connection, in a real browser through nginx: connections reset under
the page mid-answer of the real model are resumed at the exact character (the greedy answer is
the uninterrupted one), on whichever of two web processes nginx picks, and a Stop pressed while the network is down is kept until it arrives,
so the stored text is what the user saw, even once the grace has run out. A web process killed
mid-answer loses none of what its page showed: handed back as it resumes, at a Stop, as the page
reloads or closes while it reconnects, or from the tab once a reload reaches the server."""

import os
import random
import re
from urllib.parse import urlsplit

import playwright.sync_api
import psutil
import pytest
import redis

from chatapp.models import Generation, Message
from chatapp.streaming import live_channel
from chatapp.tasks import fail_interrupted_streams
from harness import waiting

from harness.page_probes import last_answer, send, wait_for_end, wait_for_true
from tests import factories
from tests.browser.conftest import open_conversation, running_stack, sign_in
from tests.fakes.resetting_proxy import resetting_proxy

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ANSWER = [f"w{i} " for i in range(150)]
SHORT_GRACE_S = 1.5
# Long enough for three resets and the resumes after them (a few hundred characters).
REAL_PROMPT, REAL_MAX_TOKENS = "Write a long story about a dragon who learns to cook.", 120
STREAMING_TEXT = ('(document.querySelector(\'#messages .message[data-role="assistant"][data-status="streaming"]'
                  ' .message-content\')?.textContent.length ?? 0)')
# Everything the answer's element showed, recorded as it changed: a reconnect, any sign of
# trouble the user should not see (an error, the Interrupted label), and the text it showed as
# its streams ended (`endedText`, before the page reads the stored answer, which replaces it).
LAST_ANSWER = """[...document.querySelectorAll('#messages .message[data-role="assistant"]')].at(-1)"""
SIGNS_PROBE = """
window.__signs = { reconnecting: 0, trouble: [], endedText: null };
new MutationObserver(() => {
  const answer = """ + LAST_ANSWER + """;
  if (!answer) return;
  if (answer.dataset.status !== "streaming" && window.__signs.endedText === null) {
    window.__signs.endedText = answer.querySelector(".message-content").textContent;
  }
  if (answer.dataset.reconnecting === "true") window.__signs.reconnecting += 1;
  const state = answer.querySelector(".message-state")?.textContent ?? "";
  if (answer.dataset.error || state.startsWith("Interrupted")) window.__signs.trouble.push(state || answer.dataset.error);
}).observe(document.body, { subtree: true, attributes: true, childList: true, characterData: true });
"""


@pytest.fixture(scope="module")
def resetting_stack(django_db_setup, django_db_blocker, fake_upstream, tmp_path_factory):
    """The stack with a grace period, reached through a proxy that can reset its connections."""
    with running_stack(fake_upstream.url, tmp_path_factory.mktemp("resetting"),
                       TEST_CHAT_RESUME_GRACE_SECONDS=20) as url, resetting_proxy(url) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def short_grace_stack(django_db_setup, django_db_blocker, fake_upstream, tmp_path_factory):
    """As resetting_stack, with a grace period that runs out while the network is down."""
    with running_stack(fake_upstream.url, tmp_path_factory.mktemp("short-grace"),
                       TEST_CHAT_RESUME_GRACE_SECONDS=SHORT_GRACE_S) as url, resetting_proxy(url) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def real_resetting_stack(django_db_setup, django_db_blocker, inference_url, tmp_path_factory):
    """The stack on the real model (greedy: the same prompt, the same answer), through the proxy."""
    with running_stack(inference_url, tmp_path_factory.mktemp("real-resetting"), CHAT_TEMPERATURE=0,
                       CHAT_MAX_TOKENS=REAL_MAX_TOKENS, TEST_CHAT_RESUME_GRACE_SECONDS=20) as url, \
            resetting_proxy(url) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def two_process_resetting_stack(django_db_setup, django_db_blocker, fake_upstream, tmp_path_factory):
    """As resetting_stack, with two daphne processes behind nginx (least connections, as `make
    run` has them) sharing Redis: a resumed stream may land on the one that does not hold the
    answer."""
    folder = tmp_path_factory.mktemp("two-web-processes")
    logs = (folder / "web-1.log", folder / "web-2.log")
    with running_stack(fake_upstream.url, folder, access_logs=logs, TEST_CHAT_RESUME_GRACE_SECONDS=20) as url, \
            resetting_proxy(url) as proxy:
        yield proxy


WEB_PROCESS_TTL_S = 2  # a killed web process is taken for gone seconds after


@pytest.fixture
def two_process_stack_saving_seldom(django_db_setup, django_db_blocker, fake_upstream, tmp_path_factory):
    """Two daphne processes behind nginx, sharing Redis, whose relays save an answer's text only
    every 30 s: one killed mid-answer dies with all it sent (nothing restarts it here: a stack
    for each test)."""
    folder = tmp_path_factory.mktemp("saving-seldom")
    logs = (folder / "web-1.log", folder / "web-2.log")
    with running_stack(fake_upstream.url, folder, access_logs=logs, TEST_CHAT_RESUME_GRACE_SECONDS=20,
                       CHAT_SAVE_INTERVAL_SECONDS=30, CHAT_WEB_PROCESS_TTL_SECONDS=WEB_PROCESS_TTL_S) as url:
        yield url


def relay_process(upstream) -> psutil.Process:
    """The web process holding the answer's relay: the one whose connection asked the upstream."""
    _, port = upstream.clients[-1]
    upstream_port = urlsplit(upstream.url).port  # a local port is unique only with its far end
    (pid,) = {connection.pid for connection in psutil.net_connections(kind="tcp")
              if connection.laddr.port == port and connection.raddr and connection.raddr.port == upstream_port
              and connection.pid != os.getpid()}
    return psutil.Process(pid)


@pytest.fixture
def chat(page, resetting_stack, user, upstream):
    upstream.script.chunks = ANSWER
    upstream.script.interval_s = 0.04
    sign_in(page, resetting_stack.url, user)
    page.evaluate(SIGNS_PROBE)
    return page


def shown_text(page) -> str:
    return last_answer(page).locator(".message-content").inner_text()


def stored_generation() -> Generation:
    waiting.wait_until(lambda: Message.objects.filter(role="assistant").exclude(status="streaming").exists(),
                       60, "the answer's final write")
    return Generation.objects.select_related("message").get()


def test_a_greedy_answer_reset_three_times_at_random_points_is_the_uninterrupted_one_character_for_character(
        page, real_resetting_stack, user):
    sign_in(page, real_resetting_stack.url, user)
    page.evaluate(SIGNS_PROBE)
    send(page, REAL_PROMPT)
    wait_for_end(page)
    uninterrupted, streamed_uninterrupted = stored_generation(), page.evaluate("window.__signs.endedText")
    seed = random.randrange(2**32)
    # Points of the shown text, with room after the last for the answer to go on past it.
    points = sorted(random.Random(seed).sample(range(len(streamed_uninterrupted) // 10,
                                                     len(streamed_uninterrupted) * 7 // 10), 3))

    page.click("#new-conversation")
    wait_for_true(page, "document.querySelector('#messages .message') === null")
    page.evaluate("window.__signs.endedText = null")
    send(page, REAL_PROMPT)
    for point in points:
        # Past the point, and a stream open to reset: text received before the last reset may
        # still be painted while the page reconnects.
        waiting.wait_until(lambda: page.evaluate(f"{STREAMING_TEXT} > {point}") and real_resetting_stack.reset() > 0,
                           60, f"the answer past {point} on an open stream (seed {seed})")
    wait_for_end(page)
    reset = Generation.objects.select_related("message").exclude(pk=uninterrupted.pk).get()

    assert uninterrupted.status in ("completed", "truncated")
    assert (reset.status, reset.message.content) == (uninterrupted.status, uninterrupted.message.content), (
        f"seed {seed}, resets at {points}")
    # What the page put together from its four streams, before it read the stored answer.
    # Ends stripped: the probe may read the text as the finished answer is drawn as Markdown.
    assert page.evaluate("window.__signs.endedText").strip() == streamed_uninterrupted.strip(), (
        f"seed {seed}, resets at {points}")
    assert (page.evaluate(f"{LAST_ANSWER}.querySelector('.message-content').textContent").strip()
            == streamed_uninterrupted.strip())
    assert page.evaluate("window.__signs.reconnecting") > 0
    assert page.evaluate("window.__signs.trouble") == []
    assert not last_answer(page).locator(".retry").is_visible()


def test_an_answer_resumed_after_a_reset_says_it_is_writing_again(chat, resetting_stack):
    send(chat, "count slowly")
    wait_for_true(chat, f"{STREAMING_TEXT} > 20")
    waiting.wait_until(lambda: resetting_stack.reset() > 0, 10, "an open stream to reset")
    wait_for_true(chat, "window.__signs.reconnecting > 0")
    held = chat.evaluate(STREAMING_TEXT)
    wait_for_true(chat, f"{STREAMING_TEXT} > {held} && {LAST_ANSWER}.dataset.reconnecting === 'false'")

    assert last_answer(chat).locator(".message-state").inner_text() == "Writing…"


def test_a_stop_pressed_while_the_network_is_down_keeps_what_the_user_saw_before_and_after_a_reload(
        chat, resetting_stack):
    send(chat, "count slowly")
    wait_for_true(chat, f"{STREAMING_TEXT} > 20")
    resetting_stack.cut()
    wait_for_true(chat, "document.querySelector('#messages .message[data-reconnecting=\"true\"]') !== null")
    chat.click("#stop")
    wait_for_end(chat)
    visible = shown_text(chat)
    resetting_stack.restore()
    generation = stored_generation()

    assert (generation.status, generation.cancelled_by) == ("stopped", "user")
    assert generation.message.content.split() == visible.split()
    assert len(generation.message.content) < len("".join(ANSWER))
    chat.reload()
    chat.wait_for_selector('#messages .message[data-role="assistant"]')
    assert shown_text(chat).split() == visible.split()
    assert last_answer(chat).locator(".message-state").inner_text() == "Stopped"


def test_a_stop_pressed_offline_that_arrives_after_the_grace_still_cuts_the_stored_text_to_what_the_user_saw(
        page, short_grace_stack, user, upstream):
    upstream.script.chunks = ANSWER
    upstream.script.interval_s = 0.04
    sign_in(page, short_grace_stack.url, user)
    send(page, "count slowly")
    wait_for_true(page, f"{STREAMING_TEXT} > 20")
    short_grace_stack.cut()
    wait_for_true(page, "document.querySelector('#messages .message[data-reconnecting=\"true\"]') !== null")
    page.click("#stop")
    wait_for_end(page)
    visible = shown_text(page)
    # Nobody came back in time: the answer ended as the departed page's, with more text than it saw.
    gone = stored_generation()
    assert (gone.cancelled_by, len(gone.message.content) > len(visible)) == ("client_gone", True)

    short_grace_stack.restore()  # the Stop the page kept goes through
    waiting.wait_until(lambda: Generation.objects.filter(pk=gone.pk, cancelled_by="user").exists(),
                       30, "the late Stop recorded")
    generation = Generation.objects.select_related("message").get(pk=gone.pk)

    assert generation.status == "stopped" and generation.message.content.split() == visible.split()
    assert shown_text(page).split() == visible.split()
    page.reload()
    page.wait_for_selector('#messages .message[data-role="assistant"]')
    assert shown_text(page).split() == visible.split()
    assert last_answer(page).locator(".message-state").inner_text() == "Stopped"



class ProcessesSeen:
    """Which web processes hold an answer's relay and serve its resumed streams, as the channel
    layer's groups in Redis say while they run: the relay listens in the answer's relay group,
    a resumed stream's process in its live group, and a channel's name carries its process
    (`specific.<process>!<channel>`, channels_redis). Members already there when it was made
    are left out: a process stopped mid-answer leaves its member for a day (the group's
    expiry), under an id a later test database hands out again."""

    def __init__(self):
        self.redis = redis.Redis.from_url(os.environ["REDIS_URL"])  # this test worker's index
        self.earlier = {member for key in self.redis.keys("asgi:group:generation-*")
                        for member in self.redis.zrange(key, 0, -1)}
        self.generation_id: int | None = None
        self.relay: set[str] = set()
        self.resumes: set[str] = set()

    def look(self) -> None:
        self.relay |= self._members(live_channel.relay_group(self.generation_id))
        self.resumes |= self._members(live_channel.live_group(self.generation_id))

    def _members(self, group: str) -> set[str]:
        return {member.decode().split(".", 1)[1].split("!", 1)[0]
                for member in self.redis.zrange(f"asgi:group:{group}", 0, -1) if member not in self.earlier}


@pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="web processes share a channel layer only on Redis")
def test_an_answer_reset_three_times_resumes_on_the_other_web_process_too_and_ends_whole(
        page, two_process_resetting_stack, user, upstream):
    stack = two_process_resetting_stack
    upstream.script.chunks = ANSWER
    upstream.script.interval_s = 0.04
    sign_in(page, stack.url, user)
    page.evaluate(SIGNS_PROBE)
    seen = ProcessesSeen()
    send(page, "count slowly")
    wait_for_true(page, f"{STREAMING_TEXT} > 0")
    seen.generation_id = Generation.objects.get().pk

    def looked(condition: bool) -> bool:
        seen.look()
        return condition

    for point in (100, 250, 400):
        waiting.wait_until(lambda: looked(page.evaluate(f"{STREAMING_TEXT} > {point}") and stack.reset() > 0),
                           60, f"the answer past {point} on an open stream")
    waiting.wait_until(lambda: looked(len(seen.resumes) > 0 and (seen.resumes - seen.relay
                                                                 or page.evaluate(f"{STREAMING_TEXT} > 500"))),
                       60, "the last resumed stream under way")
    wait_for_end(page)
    generation = stored_generation()

    assert generation.message.content == "".join(ANSWER)
    # Word by word: the probe may read the text once the finished answer is drawn as Markdown.
    assert page.evaluate("window.__signs.endedText").split() == "".join(ANSWER).split()
    assert page.evaluate("window.__signs.reconnecting") > 0
    assert page.evaluate("window.__signs.trouble") == []
    assert not last_answer(page).locator(".retry").is_visible()
    # nginx sends a request to the process with fewer open ones, and breaks ties in turn: the
    # first resume, made while the relay's process held the page's stream or right after, goes
    # to the other one.
    assert len(seen.relay) == 1 and seen.resumes - seen.relay, (seen.relay, seen.resumes)


def killed_mid_answer(page, stack_url: str, user, upstream) -> None:
    """An answer of 100 characters and more on the page, then its relay's web process killed;
    nothing of it saved yet (its relay saves every 30 s)."""
    upstream.script.chunks = ANSWER
    upstream.script.interval_s = 0.04
    sign_in(page, stack_url, user)
    page.evaluate(SIGNS_PROBE)
    send(page, "count slowly")
    wait_for_true(page, f"{STREAMING_TEXT} > 100")
    relay_process(upstream).kill()


def assert_stored_and_shown_after_a_reload(page, shown: str) -> Generation:
    """The record holds all the page showed, and shows it again after a reload."""
    generation = Generation.objects.select_related("message").get()
    assert len(shown) > 100
    assert generation.message.content == generation.final_text
    assert generation.final_text.split() == shown.split()
    page.reload()
    page.wait_for_selector('#messages .message[data-role="assistant"]')
    assert shown_text(page).split() == shown.split()
    return generation


@pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="web processes share a channel layer only on Redis")
def test_a_web_process_killed_mid_answer_loses_none_of_what_its_page_showed_before_and_after_a_reload(
        page, two_process_stack_saving_seldom, user, upstream, settings):
    killed_mid_answer(page, two_process_stack_saving_seldom, user, upstream)
    # Its heartbeat fresh for ten minutes more: the reaper ends it because its process is gone.
    settings.CHAT_STALE_STREAM_SECONDS = 600
    settings.CHAT_WEB_PROCESS_TTL_SECONDS = WEB_PROCESS_TTL_S
    waiting.wait_until(lambda: fail_interrupted_streams() > 0, 60, "the reaper ending the answer")
    wait_for_end(page)
    shown = shown_text(page)
    waiting.wait_until(lambda: Message.objects.get(role="assistant").content != "", 30,
                       "the page handing back what it was shown")

    generation = assert_stored_and_shown_after_a_reload(page, shown)
    assert (generation.status, generation.error_code) == ("failed", "interrupted")


@pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="web processes share a channel layer only on Redis")
def test_a_stop_pressed_while_an_answer_whose_web_process_was_killed_waits_for_the_reaper_keeps_what_the_user_saw(
        page, two_process_stack_saving_seldom, user, upstream, settings):
    killed_mid_answer(page, two_process_stack_saving_seldom, user, upstream)
    # Resumed on the other process, the answer looks stuck ("Writing…", nothing new): the user stops it.
    wait_for_true(page, f"window.__signs.reconnecting > 0 && {LAST_ANSWER}.dataset.reconnecting !== 'true'")
    shown = shown_text(page)
    page.click("#stop")
    waiting.wait_until(lambda: Generation.objects.get().status == "stop_requested"
                       and Message.objects.get(role="assistant").content != "", 30,
                       "the Stop recorded, and what the page was shown handed back")
    settings.CHAT_STALE_STREAM_SECONDS = 1
    waiting.wait_until(lambda: fail_interrupted_streams() > 0, 60, "the reaper ending the answer")

    generation = assert_stored_and_shown_after_a_reload(page, shown)
    assert (generation.status, generation.cancelled_by) == ("stopped", "user")
    assert last_answer(page).locator(".message-state").inner_text() == "Stopped"


RESUMES = re.compile(r"/api/generations/\d+/events\?from=")


@pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="web processes share a channel layer only on Redis")
def test_a_page_reloaded_offline_while_it_reconnects_hands_back_what_it_showed_once_a_reload_reaches_the_server(
        page, two_process_stack_saving_seldom, user, upstream, settings):
    # No web process to resume on at first (as while a lone one restarts), then no network.
    page.route(RESUMES, lambda route: route.abort())
    killed_mid_answer(page, two_process_stack_saving_seldom, user, upstream)
    page.context.set_offline(True)
    wait_for_true(page, f"{LAST_ANSWER}.dataset.reconnecting === 'true'")
    shown = shown_text(page)
    with pytest.raises(playwright.sync_api.Error, match="ERR_INTERNET_DISCONNECTED"):
        page.reload()  # nothing could be handed back as the page went
    assert Message.objects.get(role="assistant").content == ""
    page.context.set_offline(False)
    # Only now: a resume held by the route as it was taken away would go on to the server
    # (CI, 2026-12-06: the record held the text before the reload that was to hand it back).
    page.unroute(RESUMES)
    page.reload()
    waiting.wait_until(lambda: Message.objects.get(role="assistant").content != "", 30,
                       "what the tab kept handed back")
    settings.CHAT_STALE_STREAM_SECONDS = 1
    waiting.wait_until(lambda: fail_interrupted_streams() > 0, 60, "the reaper ending the answer")

    generation = assert_stored_and_shown_after_a_reload(page, shown)
    assert (generation.status, generation.error_code) == ("failed", "interrupted")



@pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="web processes share a channel layer only on Redis")
def test_a_tab_closed_while_it_reconnects_to_an_answer_whose_web_process_was_killed_hands_back_what_it_showed(
        page, two_process_stack_saving_seldom, user, upstream, settings):
    page.route(RESUMES, lambda route: route.abort())
    killed_mid_answer(page, two_process_stack_saving_seldom, user, upstream)
    wait_for_true(page, f"{LAST_ANSWER}.dataset.reconnecting === 'true'")
    shown = shown_text(page)
    page.unroute(RESUMES)
    page.close(run_before_unload=True)
    settings.CHAT_STALE_STREAM_SECONDS = 1
    waiting.wait_until(lambda: fail_interrupted_streams() > 0, 60, "the reaper ending the answer")

    waiting.wait_until(lambda: Message.objects.get(role="assistant").content != "", 30,
                       "what the tab was shown handed back as it closed")
    generation = Generation.objects.select_related("message").get()
    assert generation.final_text.split() == generation.message.content.split() == shown.split()


def test_an_answer_written_in_another_conversation_as_the_page_reloads_is_followed_to_its_end(
        page, resetting_stack, user, upstream):
    upstream.script.chunks, upstream.script.interval_s = [f"w{i} " for i in range(60)], 0.1
    other = factories.conversation(owner=user, title="Other")
    factories.message(other, content="an earlier question")
    sign_in(page, resetting_stack.url, user)
    send(page, "count slowly")
    wait_for_true(page, "window.chatappStats.paints >= 3")
    answering = Generation.objects.get().conversation_id
    open_conversation(page, other)

    page.reload()

    item = f'#conversation-list li[data-conversation-id="{answering}"]'
    wait_for_true(page, f"document.querySelector('{item}')?.dataset.writing === 'true'")  # followed
    waiting.wait_until(lambda: Generation.objects.get().status != "streaming", 30, "the answer's end")
    generation = Generation.objects.select_related("message").get()
    assert (generation.status, generation.cancelled_by) == ("completed", "")  # not interrupted
    assert generation.message.content.split() == [f"w{i}" for i in range(60)]
    wait_for_true(page, f"document.querySelector('{item}')?.dataset.writing === 'false'")
