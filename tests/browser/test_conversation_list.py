"""The conversation list while it refreshes under the user's hand, in a real browser through
nginx: the list's request is held by the test (Playwright's routing) and let go mid-gesture.
A refresh updates the items in place: a click or a rename begun before it is never lost."""

import re

import pytest
from django.utils import timezone

from chatapp.models import Conversation
from harness.page_probes import alert_text, send, wait_for_end, wait_for_handled, wait_for_true
from tests import factories
from tests.browser.conftest import PASSWORD, held, open_conversation, sign_in, sign_in_on_form

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

LIST = re.compile(r"/api/conversations\?")  # the list's GET, not a conversation's


@pytest.fixture
def chat(page, stack_with_fake_upstream, user, upstream):
    sign_in(page, stack_with_fake_upstream, user)
    return page


def listed_titles(page) -> list[str]:
    return page.locator("#conversation-list .conversation-open").all_inner_texts()


def test_a_click_begun_before_the_list_refreshed_opens_the_conversation(chat, user):
    factories.conversation(owner=user, title="Trip plans")
    recipes = factories.conversation(owner=user, title="Recipes")
    chat.reload()
    wait_for_true(chat, "document.querySelectorAll('#conversation-list li').length === 2")
    refreshes = held(chat, LIST, method="GET")
    chat.press("#conversation-search", "Enter")
    wait_for_handled(chat, lambda: len(refreshes) == 1, "the list's refresh sent")

    box = chat.locator(f'#conversation-list li[data-conversation-id="{recipes.pk}"] .conversation-open') \
        .bounding_box()
    chat.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    chat.mouse.down()
    recipes.title = "Recipes for winter"
    recipes.save(update_fields=["title"])
    refreshes[0].continue_()
    wait_for_true(chat, "[...document.querySelectorAll('#conversation-list .conversation-open')]"
                        ".some((b) => b.textContent === 'Recipes for winter')")
    chat.mouse.up()

    wait_for_true(chat, "document.querySelector('#conversation-title').textContent === "
                        "'Recipes for winter'")


def test_a_rename_under_way_while_the_list_refreshes_keeps_its_words_and_its_focus(chat, user, upstream):
    trip = factories.conversation(owner=user, title="Trip plans")
    factories.conversation(owner=user, title="Recipes")
    chat.reload()
    open_conversation(chat, trip)
    refreshes = held(chat, LIST, method="GET")
    upstream.script.chunks = ["Lisbon ", "in May."]
    send(chat, "Where shall we go?")
    wait_for_end(chat)
    wait_for_handled(chat, lambda: len(refreshes) == 1, "the list's refresh after the answer")

    item = f'#conversation-list li[data-conversation-id="{trip.pk}"]'
    chat.click(f"{item} .conversation-rename")
    chat.keyboard.type("Trip plans for May")  # the rename selects the old title: typing replaces it
    refreshes[0].continue_()  # the answer moved this conversation to the top of the list
    wait_for_true(chat, f"document.querySelector('#conversation-list li').dataset.conversationId "
                        f"=== '{trip.pk}'")

    assert chat.input_value(f"{item} .conversation-title-input") == "Trip plans for May"
    assert chat.evaluate("document.activeElement.className") == "conversation-title-input"
    chat.keyboard.press("Enter")
    wait_for_true(chat, "[...document.querySelectorAll('#conversation-list .conversation-open')]"
                        ".some((b) => b.textContent === 'Trip plans for May')")
    trip.refresh_from_db()
    assert trip.title == "Trip plans for May"
    assert listed_titles(chat) == ["Trip plans for May", "Recipes"]


# Whether the list has been read, and landed, since count_list_reads.
LIST_READ = "window.__listReads >= 1"


def count_list_reads(page) -> None:
    page.evaluate("window.__listReads = 0;"
                  " document.addEventListener('conversations-loaded', () => { window.__listReads += 1; })")


def many_conversations(chat, user, count: int) -> list:
    """`count` conversations, the newest first; the page reloaded and its first page listed."""
    made = [factories.conversation(owner=user, title=f"conv {n:02d}") for n in range(count)][::-1]
    chat.reload()
    wait_for_true(chat, "document.querySelectorAll('#conversation-list li').length === 20")
    return made


def test_older_conversations_shown_and_a_rename_among_them_outlast_the_refresh_at_an_answers_end(
        chat, user, upstream):
    made = many_conversations(chat, user, 25)
    chat.click("#more-conversations")
    wait_for_true(chat, "document.querySelectorAll('#conversation-list li').length === 25")
    upstream.script.chunks, upstream.script.interval_s = ["Still ", "writing ", "this."], 0.5
    send(chat, "hello")  # a new conversation, listed at once
    wait_for_true(chat, "document.querySelectorAll('#conversation-list li').length === 26")
    oldest = f'#conversation-list li[data-conversation-id="{made[-1].pk}"]'
    chat.click(f"{oldest} .conversation-rename")
    chat.keyboard.type("my half-typed new na")
    count_list_reads(chat)

    wait_for_end(chat)
    wait_for_true(chat, LIST_READ)  # the list read again at the answer's end

    assert chat.locator("#conversation-list li").count() == 26
    assert chat.input_value(f"{oldest} .conversation-title-input") == "my half-typed new na"
    made[-1].refresh_from_db()
    assert made[-1].title == "conv 00"


def test_show_older_after_deleting_some_lists_every_conversation_once(chat, user):
    """Show older pressed while the list's read after the last delete is on its way: Show older's,
    newer, outruns it, and that read alone brought the one the delete moved up onto the first
    page; the second page no longer holds it (CI lost "conv 02" so, on a loaded machine)."""
    made = many_conversations(chat, user, 25)
    chat.on("dialog", lambda dialog: dialog.accept())
    for gone in made[:2]:  # the newest two, one at a time, each followed by the list read again
        chat.click(f'#conversation-list li[data-conversation-id="{gone.pk}"] .conversation-delete')
        wait_for_true(chat, f"!document.querySelector('#conversation-list li[data-conversation-id=\"{gone.pk}\"]')"
                            " && document.querySelectorAll('#conversation-list li').length === 20")
    refreshes = held(chat, LIST, method="GET", most=1)
    chat.click(f'#conversation-list li[data-conversation-id="{made[2].pk}"] .conversation-delete')
    wait_for_handled(chat, lambda: len(refreshes) == 1, "the list's read after the third delete")

    chat.click("#more-conversations")

    wait_for_true(chat, "document.getElementById('more-conversations').hidden")
    refreshes[0].continue_()  # the last delete's read, outrun by Show older's
    assert sorted(listed_titles(chat)) == [f"conv {n:02d}" for n in range(22)]


def test_show_older_after_a_delete_on_another_device_skips_no_conversation(chat, user):
    """Show older read the page after those shown by its number: a conversation shown on the first
    page and deleted on another device (nothing told this page) moved the 21st onto the first page,
    and the second, read alone, began with the 22nd: the 21st was never listed."""
    made = many_conversations(chat, user, 25)
    Conversation.objects.filter(pk=made[3].pk).update(deleted_at=timezone.now())

    chat.click("#more-conversations")

    wait_for_true(chat, "document.getElementById('more-conversations').hidden")
    titles = listed_titles(chat)
    assert len(titles) == len(set(titles))
    assert set(titles) >= {c.title for c in made if c.pk != made[3].pk}


def test_an_answer_in_a_conversation_pages_down_reads_only_the_first_page_and_lists_each_once_in_order(
        chat, user, upstream):
    made = many_conversations(chat, user, 45)  # three pages
    for shown in (40, 45):
        chat.click("#more-conversations")
        wait_for_true(chat, f"document.querySelectorAll('#conversation-list li').length === {shown}")
    open_conversation(chat, made[-1])  # the oldest, on the third page
    reads = []
    chat.on("request", lambda r: LIST.search(r.url) and reads.append(r.url))

    send(chat, "hello")
    wait_for_end(chat)
    wait_for_true(chat, "document.querySelector('#conversation-list li .conversation-open').textContent === 'conv 00'")

    newest_first = [c.title for c in Conversation.objects.filter(owner=user).order_by("-updated_at", "-id")]
    assert listed_titles(chat) == newest_first and len(newest_first) == 45
    assert reads and not any("after=" in url for url in reads)
    assert chat.locator("#more-conversations").is_hidden()


def test_show_older_pressed_as_an_answer_ends_shows_the_older_conversations(chat, user, upstream):
    """The list read again at an answer's end, begun while Show older's read was on its way, won
    over it: Show older's answer was dropped, the older conversations never shown, and the user
    had to press it again. The answer's conversation stays on the first page: the list still ends
    where Show older read on from."""
    made = many_conversations(chat, user, 25)
    open_conversation(chat, made[0])
    count_list_reads(chat)
    older = held(chat, LIST, method="GET", most=1)
    chat.click("#more-conversations")
    wait_for_handled(chat, lambda: len(older) == 1, "Show older's read")

    send(chat, "hello")
    wait_for_end(chat)
    wait_for_true(chat, LIST_READ)  # the list read again at the answer's end, landed
    older[0].continue_()

    wait_for_true(chat, "document.querySelectorAll('#conversation-list li').length === 25")
    assert sorted(listed_titles(chat)) == [f"conv {n:02d}" for n in range(25)]
    assert chat.locator("#more-conversations").is_hidden()


def older_page_shown(chat, user) -> list:
    made = many_conversations(chat, user, 25)
    chat.click("#more-conversations")
    wait_for_true(chat, "document.querySelectorAll('#conversation-list li').length === 25")
    return made


def test_a_conversation_deleted_elsewhere_is_dropped_from_the_list_with_a_word_when_it_is_clicked(chat, user):
    gone = older_page_shown(chat, user)[22]  # on the second page, which no answer reads again
    Conversation.objects.filter(pk=gone.pk).update(deleted_at=timezone.now())  # another device

    chat.click(f'#conversation-list li[data-conversation-id="{gone.pk}"] .conversation-open')

    assert "“conv 02” was deleted" in alert_text(chat)
    wait_for_true(chat, f"!document.querySelector('#conversation-list li[data-conversation-id=\"{gone.pk}\"]')")
    assert chat.locator("#conversation-list li").count() == 24


def test_a_conversation_deleted_in_another_tab_leaves_this_tabs_list_at_once(chat, user):
    gone = older_page_shown(chat, user)[22]
    other = chat.context.new_page()
    other.goto(chat.url)
    other.wait_for_selector("#conversation-list li")
    other.click("#more-conversations")
    other.on("dialog", lambda dialog: dialog.accept())

    other.click(f'#conversation-list li[data-conversation-id="{gone.pk}"] .conversation-delete')

    wait_for_true(chat, f"!document.querySelector('#conversation-list li[data-conversation-id=\"{gone.pk}\"]')")
    assert chat.locator("#conversation-list li").count() == 24


# --- the rename box counts as the server does: code points, a glyph kept whole ---
FAMILY = "\U0001F468\u200D\U0001F469\u200D\U0001F467"  # one glyph of five code points (eight UTF-16 units)


@pytest.mark.parametrize("pasted, stored", [
    ("😀" * 150, "😀" * 150),  # 300 UTF-16 units, 150 code points: the server takes them all
    ("a" * 197 + FAMILY, "a" * 197),  # 202 code points: the family goes whole, not a father alone
], ids=["emoji-within-the-limit", "a-glyph-across-the-limit"])
def test_the_rename_box_holds_what_the_server_takes_counted_in_code_points(chat, user, pasted, stored):
    """The box counted 200 UTF-16 units where the server counts 200 code points: a name of
    emoji was cut at half its length, and a family across the limit cut between its people."""
    trip = factories.conversation(owner=user, title="Trip plans")
    chat.reload()
    item = f'#conversation-list li[data-conversation-id="{trip.pk}"]'
    chat.click(f"{item} .conversation-rename")

    chat.keyboard.insert_text(pasted)  # what a paste puts in
    chat.keyboard.press("Enter")

    wait_for_true(chat, f"document.querySelector('{item} .conversation-open').textContent.length === {len(stored.encode('utf-16-le')) // 2}")
    trip.refresh_from_db()
    assert trip.title == stored


def test_the_next_user_to_sign_in_on_the_page_sees_their_first_page_not_as_many_as_the_last_had_shown(chat, user):
    """The list's page count outlived a sign-out: the next user to sign in on the page was shown
    as many pages of their own as the previous user had asked for."""
    many_conversations(chat, user, 25)
    chat.click("#more-conversations")
    wait_for_true(chat, "document.querySelectorAll('#conversation-list li').length === 25")
    chat.click("#logout")
    chat.wait_for_selector("#login-form", state="visible")
    other = factories.user(password=PASSWORD)
    theirs = [factories.conversation(owner=other, title=f"theirs {n:02d}") for n in range(45)][::-1]

    sign_in_on_form(chat, other)
    chat.wait_for_selector(f'#conversation-list li:has-text("{theirs[0].title}")')
    with chat.expect_request(LIST) as showing_older:
        chat.click("#more-conversations")

    assert "after=" in showing_older.value.url
    wait_for_true(chat, "document.querySelectorAll('#conversation-list li').length === 40")
    assert listed_titles(chat) == [c.title for c in theirs[:40]]
