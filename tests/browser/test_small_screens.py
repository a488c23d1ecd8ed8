"""The chat on a phone, a phone turned sideways and a small or zoomed window (640x400 CSS px is
1280x800 at 200%), in a real browser through nginx: the reader's own scrolling wins over an
answer being written, an open panel leaves the message box in view, the top bar and the model's
name fit a 320px phone; and the user's message stands apart in forced colours."""

import pytest

from harness.page_probes import send, wait_for_end, wait_for_true
from tests import factories
from tests.browser.conftest import open_conversation, sign_in
from tests.fakes.upstream import Script

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}
NARROW_PHONE = {"width": 320, "height": 640}
SIDEWAYS = {"width": 844, "height": 390}
ZOOMED = {"width": 640, "height": 400}  # 1280x800 at 200%
STREAMED = "#messages .message[data-status='streaming'] .message-content"
# The picker's width, and the width its chosen option's name needs (a copy of it, sized to its content).
PICKER_WIDTHS = """(() => {
  const picker = document.querySelector('#model-picker');
  const copy = picker.cloneNode(true);
  copy.removeAttribute('id');
  copy.style.cssText = 'position: absolute; width: max-content; max-width: none; flex: none';
  picker.after(copy);
  const widths = [picker.offsetWidth, copy.offsetWidth];
  copy.remove();
  return widths;
})()"""
# The vertical middles of what the top bar shows: one row, they are all but equal.
TOP_BAR_MIDDLES = """[...document.querySelectorAll('.topbar > *')].filter((el) => el.getClientRects().length)
  .map((el) => { const r = el.getBoundingClientRect(); return r.top + r.height / 2; })"""
FROM_BOTTOM = "(() => { const l = document.querySelector('#messages'); return l.scrollHeight - l.scrollTop - l.clientHeight; })()"


@pytest.fixture
def phone(chromium):
    """A phone: touch, a small screen of dense pixels."""
    context = chromium.new_context(viewport=PHONE, is_mobile=True, has_touch=True, device_scale_factor=3)
    yield context.new_page()
    context.close()


def drag(page, pixels: int, step: int = 5) -> None:
    """A finger drawn down the messages by `pixels` (up the page: negative), `step` pixels a
    touch event, as a reader drags slowly back to a line they passed."""
    touch = page.context.new_cdp_session(page)
    direction = 1 if pixels > 0 else -1
    points = [{"x": 200, "y": 450 - direction * abs(pixels) // 2}]
    touch.send("Input.dispatchTouchEvent", {"type": "touchStart", "touchPoints": points})
    for _ in range(abs(pixels) // step):
        points = [{"x": 200, "y": points[0]["y"] + direction * step}]
        touch.send("Input.dispatchTouchEvent", {"type": "touchMove", "touchPoints": points})
        page.evaluate("new Promise((done) => requestAnimationFrame(() => done()))")  # a frame each
    # The finger lifted, the scroll flings on a few pixels (3 of them failed a test once, read
    # as the page moving the reader): done once the messages say their scroll ended, which
    # Chromium says of a touch's scroll once the finger is up and the fling over.
    page.evaluate("""() => { window.ended = new Promise((done) =>
        document.querySelector('#messages').addEventListener('scrollend', done, { once: true })); }""")
    touch.send("Input.dispatchTouchEvent", {"type": "touchEnd", "touchPoints": []})
    page.evaluate("ended")


def wait_for_more_text(page, chars: int) -> None:
    """Waits until the answer being written has grown by `chars` characters (so it painted since)."""
    shown = page.evaluate(f"document.querySelector(\"{STREAMED}\").textContent.length")
    wait_for_true(page, f"document.querySelector(\"{STREAMED}\")?.textContent.length > {shown + chars}")


def test_a_reader_who_drags_back_a_little_while_an_answer_is_written_is_left_where_they_are(
        phone, stack_with_fake_upstream, user, upstream):
    """Each paint took a reader within 80px of the end back to it: a slow drag, a few pixels a
    frame, never got further, and the page pulled the reader down as they read."""
    upstream.script = Script(chunks=[f"Line {n} of a long answer.\n\n" for n in range(200)], interval_s=0.05)
    sign_in(phone, stack_with_fake_upstream, user)
    send(phone, "a long answer please")
    wait_for_true(phone, "document.querySelector('#messages').scrollHeight > 2 * document.querySelector('#messages').clientHeight")

    drag(phone, 150)
    place = phone.evaluate("document.querySelector('#messages').scrollTop")
    wait_for_more_text(phone, 200)

    assert phone.evaluate("document.querySelector('#messages').scrollTop") == place
    assert phone.evaluate(FROM_BOTTOM) > 150
    phone.mouse.move(200, 450)
    phone.mouse.wheel(0, 100_000)  # back to the end: the answer is followed again
    wait_for_true(phone, f"{FROM_BOTTOM} < 2")
    wait_for_more_text(phone, 200)
    assert phone.evaluate(FROM_BOTTOM) < 2
    wait_for_end(phone)


@pytest.mark.parametrize("window", [SIDEWAYS, ZOOMED], ids=["phone-sideways", "zoomed-200"])
def test_on_a_short_window_the_open_settings_leave_the_message_box_and_some_messages_in_view(
        page, stack_with_fake_upstream, user, window):
    """The panel pushed the message box below the window (sideways, the page itself scrolled
    and Send was out of sight) and left the messages a line or none."""
    conversation = factories.conversation(owner=user, title="Notes")
    for n in range(6):
        factories.message(conversation, role="user" if n % 2 == 0 else "assistant", content=f"Message {n}")
    page.set_viewport_size(window)
    sign_in(page, stack_with_fake_upstream, user)
    if page.locator("#toggle-sidebar").is_visible():
        page.click("#toggle-sidebar")
    open_conversation(page, conversation)

    page.click("#settings-toggle")
    page.wait_for_selector("#settings-panel:not([hidden])")

    assert page.evaluate("document.scrollingElement.scrollHeight") <= window["height"]
    for control in ["#composer", "#send"]:
        box = page.locator(control).bounding_box()
        assert box["y"] + box["height"] <= window["height"], f"{control} is below the window"
    assert page.locator("#messages").bounding_box()["height"] >= window["height"] / 4
    page.click("#settings-panel [type=submit]")  # the panel scrolls to its own last control
    wait_for_true(page, "document.querySelector('#announcer').textContent.startsWith('Settings saved')")


@pytest.mark.parametrize("window", [PHONE, ZOOMED], ids=["phone", "zoomed-200"])
def test_a_tap_on_the_chat_beside_the_open_drawer_closes_the_drawer(chromium, stack_with_fake_upstream, user, window):
    """The chat under the drawer is inert (Tab stays in the drawer), so a tap on what shows of
    it beside the drawer did nothing at all: the drawer stayed until Close was found."""
    context = chromium.new_context(viewport=window, is_mobile=True, has_touch=True)
    page = context.new_page()
    sign_in(page, stack_with_fake_upstream, user)
    page.tap("#toggle-sidebar")
    wait_for_true(page, "document.body.classList.contains('sidebar-open')")
    drawer_width = page.evaluate("document.querySelector('#sidebar').offsetWidth")  # as it lies once slid in

    page.touchscreen.tap(drawer_width + 20, window["height"] / 2)

    wait_for_true(page, "!document.body.classList.contains('sidebar-open')")
    assert page.evaluate("document.activeElement.id") == "toggle-sidebar"
    assert not page.evaluate("document.querySelector('main').inert")
    context.close()


def test_on_a_phone_a_conversation_picked_in_the_drawer_is_shown_to_read_without_the_keyboard_over_it(
        phone, stack_with_fake_upstream, user):
    """The message box took the focus, which on a touch screen raises the keyboard over half the
    conversation just picked to be read. The messages take it instead: the focus is not lost, and
    a keyboard user's Tab still reaches the message box."""
    conversation = factories.conversation(owner=user, title="Notes")
    factories.message(conversation, content="What was the plan?")
    sign_in(phone, stack_with_fake_upstream, user)
    phone.tap("#toggle-sidebar")

    phone.tap(f'#conversation-list li[data-conversation-id="{conversation.pk}"] .conversation-open')

    wait_for_true(phone, "document.querySelector('#conversation-title').textContent === 'Notes'")
    wait_for_true(phone, "document.activeElement.id === 'messages'")
    phone.tap("#toggle-sidebar")
    phone.tap("#new-conversation")  # to write, where the keyboard is wanted
    wait_for_true(phone, "document.activeElement.id === 'composer'")


def test_on_a_phone_a_stopped_answer_is_left_to_read_without_the_keyboard_over_it(
        phone, stack_with_fake_upstream, user, upstream):
    """Stop, gone with the answer's end, gave the focus to the message box: on a touch screen that
    raises the keyboard over the answer just stopped to be read. The messages take it instead."""
    upstream.script = Script(chunks=["The first line.", " The rest."], stall_after=1)
    sign_in(phone, stack_with_fake_upstream, user)
    send(phone, "a long answer please")
    wait_for_true(phone, f"document.querySelector(\"{STREAMED}\")?.textContent.length > 0")

    phone.tap("#stop")

    wait_for_end(phone)
    assert phone.evaluate("document.activeElement.id") == "messages"


def test_in_forced_colours_the_users_message_keeps_an_edge_that_sets_it_apart(page, stack_with_fake_upstream, user):
    """Forced colours (Windows' high contrast) paint every background in the page's own colour: the
    user's message, set apart by its background alone, ran on into the answer under it."""
    conversation = factories.conversation(owner=user, title="Notes")
    factories.message(conversation, role="user", content="What was the plan?")
    factories.message(conversation, role="assistant", content="To meet at noon.")
    page.emulate_media(forced_colors="active")
    sign_in(page, stack_with_fake_upstream, user)
    open_conversation(page, conversation)

    edge = page.evaluate("(() => { const s = getComputedStyle(document.querySelector("
                         "'.message[data-role=user] .message-content'));"
                         " return [s.borderTopStyle, parseFloat(s.borderTopWidth), s.borderTopColor, s.backgroundColor]; })()")

    style, width, colour, background = edge
    assert (style, width >= 1, colour != background) == ("solid", True, True), edge


def test_on_a_narrow_phone_the_model_picker_shows_the_models_name_whole_or_cut_with_an_ellipsis(
        chromium, stack_with_fake_upstream, user):
    """At 320px the picker, beside a Settings button in words, was 187px wide: "SmolLM2-135M-Ins"
    showed, cut mid-word with nothing to say so. A name too long for any phone ends in an ellipsis,
    and the picker's tooltip and its list of options name it whole."""
    retired = "a-retired-model-whose-name-is-longer-than-any-phone-is-wide"
    conversation = factories.conversation(owner=user, title="Old notes", model=retired)
    context = chromium.new_context(viewport=NARROW_PHONE, is_mobile=True, has_touch=True)
    page = context.new_page()
    sign_in(page, stack_with_fake_upstream, user)
    wait_for_true(page, "document.querySelector('#model-picker').value !== ''")

    shown, needed = page.evaluate(PICKER_WIDTHS)
    assert shown >= needed, f"the default model's name needs {needed}px, the picker is {shown}px"
    page.tap("#toggle-sidebar")
    open_conversation(page, conversation)
    shown, needed = page.evaluate(PICKER_WIDTHS)
    assert shown < needed
    assert page.evaluate("getComputedStyle(document.querySelector('#model-picker')).textOverflow") == "ellipsis"
    assert retired in page.get_attribute("#model-picker", "title")
    context.close()


def test_on_a_phone_the_top_bar_is_one_row_with_the_account_controls_in_a_menu(chromium, stack_with_fake_upstream, user):
    """At 390px and at 320px Sign out fell to a second row of the top bar, under Change password:
    the bar took two rows from the conversation. They are in the account's menu now."""
    context = chromium.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    page = context.new_page()
    sign_in(page, stack_with_fake_upstream, user)

    for window in [PHONE, NARROW_PHONE]:
        page.set_viewport_size(window)
        middles = page.evaluate(TOP_BAR_MIDDLES)
        assert max(middles) - min(middles) < 2, f"at {window['width']}px: rows at {middles}"
    assert not page.locator("#logout").is_visible()
    page.tap("#account-toggle")
    assert page.locator("#user-name").inner_text() == user.username
    page.keyboard.press("Escape")
    assert not page.locator("#logout").is_visible()
    assert page.evaluate("document.activeElement.id") == "account-toggle"
    page.tap("#account-toggle")
    page.tap("#logout")
    page.wait_for_selector("#login-form")
    context.close()
