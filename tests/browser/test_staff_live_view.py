"""An admin watches the answers streaming now on the live view and stops one, in a real browser
through nginx; the user's page says who stopped it."""

import pytest

from chatapp.models import Conversation, Generation
from harness import waiting
from harness.page_probes import last_answer, send, wait_for_end, wait_for_handled, wait_for_true
from tests import factories
from tests.browser.conftest import PASSWORD, sign_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SLOW_ANSWER = [f"w{i} " for i in range(200)]


@pytest.fixture
def reporting_upstream(upstream):
    """The stand-in upstream with some figures on its /metrics, for this test only."""
    upstream.metrics = "inference_running_sequences 1\ninference_kv_cache_usage_ratio 0.25\n"
    yield upstream
    upstream.metrics = ""


@pytest.fixture
def admin_page(chromium):
    """The admin's own browser context: its own session."""
    context = chromium.new_context(viewport={"width": 1200, "height": 800})
    page = context.new_page()
    page.console_errors = []
    page.on("pageerror", lambda e: page.console_errors.append(str(e)))
    yield page
    context.close()


def admin_watching_a_slow_answer(page, admin_page, stack_url: str, user, upstream) -> Generation:
    """The user's answer streaming slowly, and an admin on the live view; the answer's row."""
    upstream.script.chunks, upstream.script.interval_s = SLOW_ANSWER, 0.05
    sign_in(page, stack_url, user)
    send(page, "count slowly")
    wait_for_true(page, "window.chatappStats.paints >= 3")
    sign_in(admin_page, stack_url, factories.staff_member(password=PASSWORD))
    admin_page.goto(stack_url + "/staff/live/")
    return Generation.objects.get()


def test_an_admin_sees_the_streaming_answer_and_its_stop_ends_it_as_stopped_by_an_administrator(
        page, admin_page, stack_with_fake_upstream, user, reporting_upstream):
    upstream = reporting_upstream
    generation = admin_watching_a_slow_answer(page, admin_page, stack_with_fake_upstream, user, upstream)
    row = admin_page.locator(f'#streams tr[data-generation-id="{generation.pk}"]')
    row.wait_for()
    listed = row.inner_text()
    replica = admin_page.locator("#replicas tbody tr").first.inner_text()

    row.locator("button").click()
    wait_for_end(page)
    waiting.wait_until(lambda: Generation.objects.get().status == "stopped", 30, "the answer's final write")
    admin_page.locator(f'#streams tr[data-generation-id="{generation.pk}"]').wait_for(state="detached")
    stopped = Generation.objects.select_related("message").get()

    assert user.username in listed and f"#{Conversation.objects.get().pk}" in listed
    assert generation.model in listed.split("\t")  # the answer's model, as its conversation chose
    # The stand-in says how many it runs and its cache use, but not how many wait.
    assert replica.split("\t") == [upstream.url, "1", "–", "25.0%"]
    assert (stopped.status, stopped.cancelled_by) == ("stopped", "admin")
    assert 0 < len(stopped.message.content) < len("".join(SLOW_ANSWER))
    wait_for_true(page, "[...document.querySelectorAll('#messages .message')].at(-1).dataset.cancelledBy === 'admin'")
    assert last_answer(page).locator(".message-state").inner_text() == "Stopped by an administrator"
    assert admin_page.locator("#no-streams").is_visible()
    assert admin_page.console_errors == [] and page.console_errors == []


def test_a_stop_the_admin_reached_by_keyboard_keeps_its_focus_as_the_view_redraws_and_enter_stops_the_answer(
        page, admin_page, stack_with_fake_upstream, user, upstream):
    generation = admin_watching_a_slow_answer(page, admin_page, stack_with_fake_upstream, user, upstream)
    stop = admin_page.locator(f'#streams tr[data-generation-id="{generation.pk}"] button')
    stop.focus()
    updated = admin_page.locator("#connection").inner_text()

    wait_for_true(admin_page, f"document.getElementById('connection').textContent !== {updated!r}")  # redrawn
    wait_for_true(admin_page, "document.getElementById('connection').textContent !== "
                              f"{admin_page.locator('#connection').inner_text()!r}")  # and again

    assert stop.evaluate("button => button === document.activeElement")
    admin_page.keyboard.press("Enter")
    wait_for_end(page)
    waiting.wait_until(lambda: Generation.objects.get().status == "stopped", 30, "the answer's final write")
    assert Generation.objects.get().cancelled_by == "admin"


@pytest.mark.parametrize("path", ["/staff/live/", "/staff/audit/"])
def test_the_staff_pages_and_their_charts_follow_the_dark_colour_scheme(
        admin_page, stack_with_fake_upstream, path):
    factories.generation(factories.message(factories.conversation(), role="assistant"), status="completed")
    sign_in(admin_page, stack_with_fake_upstream, factories.staff_member(password=PASSWORD))
    admin_page.emulate_media(color_scheme="dark")

    admin_page.goto(stack_with_fake_upstream + path)
    admin_page.locator("h1").wait_for()
    colours = admin_page.evaluate("""() => {
        const colour = (el, name) => el && getComputedStyle(el)[name];
        return [colour(document.body, 'backgroundColor'), colour(document.body, 'color'),
                colour(document.querySelector('svg text'), 'fill')];
    }""")

    background, text, chart_text = colours
    assert background == "rgb(20, 22, 26)"
    assert text == "rgb(230, 232, 235)"
    assert chart_text == (text if path == "/staff/audit/" else None)  # the live page draws no chart
    assert admin_page.console_errors == []


def test_a_stop_the_server_refused_may_be_pressed_again_and_then_stops_the_answer(
        page, admin_page, stack_with_fake_upstream, user, upstream):
    generation = admin_watching_a_slow_answer(page, admin_page, stack_with_fake_upstream, user, upstream)
    admin_page.route("**/api/staff/generations/*/stop", lambda route: route.fulfill(
        status=503, content_type="application/json",
        body='{"error": {"code": "database_unavailable", "message": "the database is down"}}'))
    stop = admin_page.locator(f'#streams tr[data-generation-id="{generation.pk}"] button')
    stop.click()
    wait_for_true(admin_page, "document.querySelector('#streams button').textContent.includes('failed')")

    admin_page.unroute("**/api/staff/generations/*/stop")
    stop.click(timeout=5_000)

    waiting.wait_until(lambda: Generation.objects.get().status == "stopped", 30, "the answer's final write")
    assert Generation.objects.get().cancelled_by == "admin"


def test_a_long_conversation_title_leaves_each_answers_stop_on_screen(
        page, admin_page, stack_with_fake_upstream, user, upstream):
    generation = admin_watching_a_slow_answer(page, admin_page, stack_with_fake_upstream, user, upstream)
    Conversation.objects.update(title="x" * 200)

    wait_for_true(admin_page, f"document.querySelector('#streams').textContent.includes('{'x' * 200}')")

    box = admin_page.locator(f'#streams tr[data-generation-id="{generation.pk}"] button').bounding_box()
    assert box["x"] + box["width"] <= admin_page.viewport_size["width"]


def test_the_live_view_follows_again_after_a_reconnect_the_server_refused(admin_page, stack_with_fake_upstream):
    sign_in(admin_page, stack_with_fake_upstream, factories.staff_member(password=PASSWORD))
    tries = []

    def stream_then_refuse(route):  # the stream ends, then a web process restarting answers 502
        tries.append(route.request.url)
        if len(tries) == 1:
            route.fulfill(status=200, content_type="text/event-stream",
                          body='event: live\ndata: {"streams": [], "replicas": []}\n\n')
        elif len(tries) == 2:
            route.fulfill(status=502, content_type="application/json",
                          body='{"error": {"code": "server_unreachable", "message": "restarting"}}')
        else:
            route.continue_()

    admin_page.route("**/api/staff/live/events", stream_then_refuse)
    admin_page.goto(stack_with_fake_upstream + "/staff/live/")

    wait_for_handled(admin_page, lambda: len(tries) >= 3, "a third try after the refused one", timeout_s=30)
    wait_for_true(admin_page, "document.getElementById('connection').textContent.startsWith('Updated')")
