"""The small things a user notices, in a real browser through nginx: the phone-only menu button,
Back and Forward between conversations, raw HTML and unsafe links in answers, error messages in
sentences, and the message length limit shown before sending."""

import pytest

from chatapp.models import Conversation, Generation, Message
from harness import waiting
from harness.page_probes import alert_text, last_answer, send, wait_for_end, wait_for_handled, wait_for_true
from tests import factories
from tests.browser.conftest import held, running_stack, sign_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

MAX_MESSAGE_CHARS = 100


@pytest.fixture(scope="module")
def stack(django_db_setup, django_db_blocker, fake_upstream, tmp_path_factory):
    with running_stack(fake_upstream.url, tmp_path_factory.mktemp("small"),
                       CHAT_MAX_MESSAGE_CHARS=MAX_MESSAGE_CHARS) as url:
        yield url


@pytest.fixture
def chat(page, stack, user, upstream):
    sign_in(page, stack, user)
    return page


def shown_title(page) -> str:
    return page.locator("#conversation-title").inner_text()


# --- the phone-only menu button ---
def test_the_menu_button_shows_on_a_phone_and_not_on_a_desktop(chat):
    display = "getComputedStyle(document.getElementById('toggle-sidebar')).display"

    on_desktop = chat.evaluate(display)
    chat.set_viewport_size({"width": 390, "height": 800})
    wait_for_true(chat, f"{display} !== 'none'")

    assert on_desktop == "none"
    assert chat.locator("#toggle-sidebar").is_visible()
    chat.set_viewport_size({"width": 1200, "height": 800})
    wait_for_true(chat, f"{display} === 'none'")
    assert not chat.locator("#toggle-sidebar").is_visible()
    assert not chat.locator("#close-sidebar").is_visible()


def test_on_a_phone_the_title_has_a_line_of_its_own_above_the_model_picker(chat, user):
    conversation = factories.conversation(owner=user, title="Packing list for the trip")
    chat.set_viewport_size({"width": 390, "height": 800})
    chat.evaluate(f"location.hash = '#/c/{conversation.pk}'")
    wait_for_true(chat, "document.querySelector('#conversation-title').textContent === 'Packing list for the trip'")

    title = chat.locator("#conversation-title").bounding_box()
    picker = chat.locator("#model-picker").bounding_box()

    assert title["width"] > 300  # it was squeezed to a letter beside the picker
    assert picker["y"] >= title["y"] + title["height"]


# --- right-to-left writing ---
def test_hebrew_and_arabic_read_right_to_left_where_they_are_shown_and_written(chat, upstream):
    """Every element took the page's left-to-right direction: "שלום! מה שלומך?" showed its
    question mark at the right-hand end, as "?שלומך מה !שלום" reads, in the message, the title
    and the list; an answer in Arabic likewise, while English stayed left to right."""
    upstream.script.chunks = ["مرحبا! ", "كيف حالك؟"]
    direction = "(selector) => getComputedStyle(document.querySelector(selector)).direction"

    chat.fill("#composer", "שלום! מה שלומך?")
    typed = chat.evaluate(f"({direction})('#composer')")
    chat.press("#composer", "Enter")
    wait_for_end(chat)
    wait_for_true(chat, "document.querySelector('#conversation-title').textContent === 'שלום! מה שלומך?'")

    shown = {where: chat.evaluate(f"({direction})({selector!r})") for where, selector in {
        "question": '#messages .message[data-role="user"] .message-content',
        "answer": '#messages .message[data-role="assistant"] .message-content',
        "title": "#conversation-title",
        "list": '#conversation-list [aria-current="true"]',
    }.items()}
    assert (typed, shown) == ("rtl", dict.fromkeys(shown, "rtl"))
    chat.fill("#composer", "Hello! How are you?")
    assert chat.evaluate(f"({direction})('#composer')") == "ltr"
    assert chat.evaluate(f"({direction})('.brand')") == "ltr"


# --- the address names the open conversation ---
def test_back_and_forward_move_between_conversations_and_an_edited_address_opens_one(chat, user):
    first = factories.conversation(owner=user, title="First")
    second = factories.conversation(owner=user, title="Second")
    third = factories.conversation(owner=user, title="Third")
    chat.reload()
    chat.wait_for_selector(f'#conversation-list li[data-conversation-id="{first.pk}"]')

    chat.click(f'li[data-conversation-id="{first.pk}"] .conversation-open')
    wait_for_true(chat, f"location.hash === '#/c/{first.pk}'")
    chat.click(f'li[data-conversation-id="{second.pk}"] .conversation-open')
    wait_for_true(chat, "document.querySelector('#conversation-title').textContent === 'Second'")

    chat.go_back()
    wait_for_true(chat, "document.querySelector('#conversation-title').textContent === 'First'")
    assert chat.evaluate("location.hash") == f"#/c/{first.pk}"
    chat.go_forward()
    wait_for_true(chat, "document.querySelector('#conversation-title').textContent === 'Second'")
    chat.evaluate(f"location.hash = '#/c/{third.pk}'")
    wait_for_true(chat, "document.querySelector('#conversation-title').textContent === 'Third'")
    assert chat.locator(f'li[data-conversation-id="{third.pk}"] [aria-current="true"]').count() == 1
    chat.go_back()
    wait_for_true(chat, "document.querySelector('#conversation-title').textContent === 'Second'")
    assert chat.console_errors == []


def test_new_conversation_clicked_twice_before_the_server_answers_makes_one_conversation(chat, user):
    """Each click created one: a double click left an empty "New conversation" in the list."""
    factories.message(factories.conversation(owner=user, title="Notes"), content="a question")
    chat.reload()
    chat.wait_for_selector('#conversation-list li:has-text("Notes")')
    creations = held(chat, "**/api/conversations", method="POST")

    chat.dblclick("#new-conversation")
    wait_for_handled(chat, lambda: len(creations) >= 1, "a conversation asked for")
    creations[0].continue_()
    wait_for_true(chat, "/^#\\/c\\/\\d+$/.test(location.hash) && document.querySelectorAll("
                        "'#conversation-list li').length === 2")

    for late in creations[1:]:
        late.continue_()
    assert len(creations) == 1
    assert Conversation.objects.filter(owner=user).count() == 2


def test_a_new_conversation_is_named_by_its_first_line_while_its_first_answer_is_written(chat, upstream):
    upstream.script.stall_after = 1  # the answer stays open until the test stops it

    send(chat, "Plan a week in Lisbon\nwith museums and food")
    chat.wait_for_selector('#messages .message[data-role="assistant"] .message-content:has-text("Hello")')

    wait_for_true(chat, "document.querySelector('#conversation-title').textContent === 'Plan a week in Lisbon'")
    assert chat.locator('#conversation-list [aria-current="true"]').inner_text() == "Plan a week in Lisbon"
    assert last_answer(chat).get_attribute("data-status") == "streaming"
    chat.click("#stop")
    wait_for_end(chat)


def test_deleting_the_open_conversation_while_its_answer_is_written_stops_the_answer_quietly(chat, upstream):
    upstream.script.stall_after = 1  # the answer stays open until something stops it
    send(chat, "Write me a long story")
    chat.wait_for_selector('#messages .message[data-role="assistant"] .message-content:has-text("Hello")')
    generation = Generation.objects.get()

    chat.once("dialog", lambda dialog: dialog.accept())
    chat.click(f'li[data-conversation-id="{generation.conversation_id}"] .conversation-delete')
    wait_for_true(chat, "document.querySelector('#conversation-title').textContent === 'New conversation'")
    hung_up = upstream.hung_up.wait(10)
    # The delete records the Stop; the relay writes the row's end once it has hung up.
    waiting.wait_until(lambda: Generation.objects.get(pk=generation.pk).status not in Generation.LIVE_STATUSES,
                       30, "the stopped answer's final write")

    generation.refresh_from_db()
    assert hung_up
    assert (generation.status, generation.cancelled_by) == ("stopped", "user")
    assert chat.locator(f'li[data-conversation-id="{generation.conversation_id}"]').count() == 0
    assert chat.locator("#alert").is_hidden()
    assert chat.console_errors == []


def test_a_conversation_opened_from_a_bookmarked_address_is_shown_with_its_messages(page, stack, user):
    conversation = factories.conversation(owner=user, title="Bookmarked")
    factories.message(conversation, content="What I asked before")

    page.goto(f"{stack}/#/c/{conversation.pk}")
    page.fill("#login-form [name=username]", user.username)
    page.fill("#login-form [name=password]", "a-long-test-password")
    page.click("#login-form [type=submit]")

    page.wait_for_selector('#messages .message[data-role="user"]')
    assert shown_title(page) == "Bookmarked"
    assert page.locator("#messages").inner_text().startswith("What I asked before")


def test_an_unknown_or_someone_elses_conversation_in_the_address_says_so_and_the_page_still_works(
        chat, user, upstream):
    foreign = factories.conversation(title="Not yours")
    factories.message(foreign, content="a secret")
    mine = factories.conversation(owner=user, title="Mine")

    for address in (f"#/c/{foreign.pk}", "#/c/987654321", "#/c/not-a-number"):
        chat.evaluate(f"location.hash = '#/c/{mine.pk}'")
        wait_for_true(chat, "document.querySelector('#conversation-title').textContent === 'Mine'")
        chat.evaluate(f"location.hash = {address!r}")

        assert alert_text(chat) == "There is no conversation at this address. It may have been deleted."
        assert shown_title(chat) == "New conversation"
        assert "a secret" not in chat.locator("body").inner_text()
    send(chat, "Still working?")
    wait_for_end(chat)
    assert last_answer(chat).get_attribute("data-status") == "completed"
    # Chromium logs every 404 response; nothing else may go wrong.
    assert [e for e in chat.console_errors if "status of 404" not in e] == []


def test_the_skip_link_does_not_leave_the_open_conversation(chat, user):
    conversation = factories.conversation(owner=user, title="Staying")
    chat.evaluate(f"location.hash = '#/c/{conversation.pk}'")
    wait_for_true(chat, "document.querySelector('#conversation-title').textContent === 'Staying'")

    chat.locator(".skip-link").focus()
    chat.keyboard.press("Enter")  # the skip link goes to #composer

    wait_for_true(chat, "location.hash === '#composer'")
    assert shown_title(chat) == "Staying"
    assert chat.locator("#alert").is_hidden()


# --- answers: raw HTML and links ---
def test_a_block_of_raw_html_in_an_answer_is_shown_as_text_with_its_lines(chat, upstream):
    upstream.script.chunks = ["Before\n\n", "<div>\n", "  first line\n", "second line\n", "</div>\n\n", "After"]

    send(chat, "raw html please")
    wait_for_end(chat)

    content = last_answer(chat).locator(".message-content")
    lines = [line.strip() for line in content.inner_text().splitlines() if line.strip()]
    assert lines == ["Before", "<div>", "first line", "second line", "</div>", "After"]
    assert content.locator("div").count() == 0


def test_a_table_on_a_phone_keeps_each_cells_words_and_numbers_whole_and_scrolls_instead(chat, upstream):
    upstream.script.chunks = ["| Name | Quantity | Price |\n", "|---|---|---|\n",
                              "| Widget | 100 | 1234567.89 |\n", "| Gadget with a longer name | 12 | 1.20 |\n"]
    chat.set_viewport_size({"width": 390, "height": 844})

    send(chat, "a table please")
    wait_for_end(chat)

    lines_per_cell = chat.evaluate("""() => [...document.querySelectorAll('.message-content td, .message-content th')]
        .filter((cell) => !cell.textContent.includes(' '))
        .map((cell) => { const range = document.createRange(); range.selectNodeContents(cell);
                         return [cell.textContent, range.getClientRects().length]; })""")
    assert lines_per_cell and all(lines == 1 for _, lines in lines_per_cell), lines_per_cell
    assert chat.evaluate("document.documentElement.scrollWidth <= innerWidth")  # the table scrolls, not the page
    chat.set_viewport_size({"width": 1200, "height": 800})


def test_links_with_unsafe_addresses_are_plain_text_and_safe_ones_stay_links(chat, upstream):
    upstream.script.chunks = ["[run](javascript:alert(1)) ", "[vb](vbscript:msgbox(1)) ",
                              "[page](data:text/html,hi) ", "![pic](javascript:alert(2)) ",
                              "[docs](https://example.com/docs)"]

    send(chat, "links please")
    wait_for_end(chat)

    content = last_answer(chat).locator(".message-content")
    links = content.locator("a")
    assert links.count() == 1
    assert links.get_attribute("href") == "https://example.com/docs"
    assert content.inner_text().split() == ["run", "vb", "page", "pic", "docs"]


def test_a_link_whose_words_name_another_address_says_where_it_really_goes(chat, upstream):
    """[https://mybank.com](https://evil.example/login) showed only the bank's address."""
    upstream.script.chunks = ["[https://mybank.com](https://evil.example/login) ",
                              "[www.docs.example/a](https://docs.example/b) ", "[docs](https://docs.example/c)"]

    send(chat, "links please")
    wait_for_end(chat)

    content = last_answer(chat).locator(".message-content")
    assert content.locator("a").count() == 3
    assert content.inner_text().split() == ["https://mybank.com", "(evil.example)", "www.docs.example/a", "docs"]
    assert content.locator("a").first.get_attribute("title") == "https://evil.example/login"


# --- errors in sentences ---
def test_a_busy_model_is_reported_in_a_sentence_and_its_code_stays_in_the_audit_row(chat, upstream):
    upstream.script.status = 429

    send(chat, "are you there?")

    assert alert_text(chat) == "The model is busy right now. Please try again in a moment."
    assert "upstream_busy" not in chat.locator("body").inner_text()
    assert Generation.objects.get().error_code == "upstream_busy"


def test_a_message_the_model_refused_comes_back_to_the_composer_and_nothing_is_left_stored(
        chat, upstream):
    upstream.script.status = 500  # the app answers 502 upstream_error, before any stream

    send(chat, "are you there?")

    assert alert_text(chat) == "The model could not answer this request. Please try again."
    wait_for_true(chat, "document.querySelector('#composer').value === 'are you there?'")
    assert chat.locator('.message[data-role="assistant"]').count() == 0
    assert not Message.objects.exists() and Generation.objects.get().status == "failed"


def test_an_answer_that_fails_midway_says_so_in_a_sentence_not_the_upstream_code(chat, upstream):
    upstream.script.chunks = ["Some ", "text ", "then"]
    upstream.script.error_after = 2

    send(chat, "fail please")
    wait_for_end(chat)

    answer = last_answer(chat)
    assert answer.get_attribute("data-status") == "failed"
    assert answer.locator(".message-state").inner_text() == "Failed: Something went wrong. Please try again."
    assert "engine_error" not in chat.locator("body").inner_text()
    assert "fell over" not in chat.locator("body").inner_text()
    assert Generation.objects.get().error_code == "engine_error"


# --- the message length limit ---
def test_a_message_pasted_with_an_invisible_nul_is_sent_without_it(chat, upstream):
    """Copied from a terminal or a binary file, the NUL showed as nothing; the server refused the
    message (PostgreSQL cannot store one) and the page said "Reload the page", after which the
    words came back with the NUL, to be refused again."""
    chat.fill("#composer", "copied from a log\x00 line")
    chat.press("#composer", "Enter")
    wait_for_end(chat)

    assert chat.locator("#alert").is_hidden()
    assert Message.objects.get(role="user").content == "copied from a log line"


def test_the_composer_shows_the_limit_near_it_and_will_not_send_beyond_it(chat, upstream):
    counter = chat.locator("#composer-count")

    chat.fill("#composer", "a" * 80)
    far_below = counter.is_visible()
    chat.fill("#composer", "a" * 95)
    near = counter.inner_text()
    chat.fill("#composer", "a" * 101)
    over = counter.inner_text()
    send_disabled_over = chat.locator("#send").is_disabled()
    chat.press("#composer", "Enter")

    assert not far_below
    assert near == f"95 / {MAX_MESSAGE_CHARS}"
    assert over == f"101 / {MAX_MESSAGE_CHARS}: 1 over the limit"
    assert send_disabled_over
    assert chat.get_attribute("#composer", "aria-invalid") == "true"
    assert chat.locator("#messages .message").count() == 0
    assert chat.input_value("#composer") == "a" * 101  # nothing was sent or lost
    assert Message.objects.count() == 0

    chat.press("#composer", "Backspace")
    assert chat.locator("#send").is_enabled()
    chat.press("#composer", "Enter")
    wait_for_end(chat)
    assert last_answer(chat).get_attribute("data-status") == "completed"
    assert counter.is_hidden()


def test_a_messages_editor_shows_the_limit_as_the_composer_does_and_will_not_send_beyond_it(chat, user):
    """Its Send stayed on past the limit, for the server to refuse what the page could have said."""
    conversation = factories.conversation(owner=user, title="Edited")
    question = factories.message(conversation, content="short q")
    factories.message(conversation, role="assistant", content="an answer")
    chat.evaluate(f"location.hash = '#/c/{conversation.pk}'")
    chat.click('#messages .message[data-role="user"] .edit')
    counter = chat.locator(".edit-count")

    chat.fill(".edit-input", "b" * 95)
    near = counter.inner_text()
    chat.fill(".edit-input", "b" * 101)
    over = counter.inner_text()
    chat.press(".edit-input", "Enter")

    assert near == f"95 / {MAX_MESSAGE_CHARS}"
    assert over == f"101 / {MAX_MESSAGE_CHARS}: 1 over the limit"
    assert chat.locator(".edit-save").is_disabled()
    assert chat.input_value(".edit-input") == "b" * 101  # nothing was sent or lost
    assert Message.objects.get(pk=question.pk).content == "short q"
    chat.press(".edit-input", "Backspace")
    assert chat.locator(".edit-save").is_enabled()
    chat.press(".edit-input", "Enter")
    wait_for_end(chat)
    assert Message.objects.get(pk=question.pk).content == "b" * 100


def test_on_a_phone_the_open_drawer_keeps_the_keyboard_until_it_closes(chat, user):
    for n in range(2):
        factories.conversation(owner=user, title=f"Listed {n}")
    chat.set_viewport_size({"width": 390, "height": 800})
    chat.reload()
    chat.click("#toggle-sidebar")
    wait_for_true(chat, "document.activeElement.id === 'conversation-search'")

    outside = []
    for _ in range(12):  # past every control in the drawer
        chat.keyboard.press("Tab")
        # The page itself is where Tab leaves the document for the browser's own controls.
        outside += chat.evaluate("""() => { const el = document.activeElement;
            return el === document.body || el.closest('#sidebar') ? [] : [el.outerHTML.slice(0, 60)]; }""")

    chat.keyboard.press("Escape")
    wait_for_true(chat, "!document.body.classList.contains('sidebar-open')")
    assert outside == [], "Tab left the drawer for the controls under it"
    assert chat.evaluate("document.activeElement.id") == "toggle-sidebar"
    chat.click("#toggle-sidebar")  # open again, then the window widens: no drawer, nothing inert
    chat.set_viewport_size({"width": 1200, "height": 800})
    wait_for_true(chat, "!document.querySelector('main').inert")
