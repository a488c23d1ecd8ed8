"""The conversation list while it refreshes under the user's hand, in a real browser through
nginx: the list's request is held by the test (Playwright's routing) and let go mid-gesture.
A refresh updates the items in place: a click or a rename begun before it is never lost."""

import re

import pytest

from harness.page_probes import send, wait_for_end, wait_for_handled, wait_for_true
from tests import factories
from tests.browser.conftest import held, open_conversation, sign_in

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
    chat.evaluate("window.__loads = 0; document.addEventListener('conversations-loaded', () => { window.__loads += 1; })")

    wait_for_end(chat)
    wait_for_true(chat, "window.__loads >= 1")  # the list read again at the answer's end

    assert chat.locator("#conversation-list li").count() == 26
    assert chat.input_value(f"{oldest} .conversation-title-input") == "my half-typed new na"
    made[-1].refresh_from_db()
    assert made[-1].title == "conv 00"


def test_show_older_after_deleting_some_lists_every_conversation_once(chat, user):
    made = many_conversations(chat, user, 25)
    chat.on("dialog", lambda dialog: dialog.accept())
    for gone in made[:3]:  # the newest three, one at a time
        chat.click(f'#conversation-list li[data-conversation-id="{gone.pk}"] .conversation-delete')
        wait_for_true(chat, f"!document.querySelector('#conversation-list li[data-conversation-id=\"{gone.pk}\"]')")

    chat.click("#more-conversations")

    wait_for_true(chat, "document.getElementById('more-conversations').hidden")
    assert sorted(listed_titles(chat)) == [f"conv {n:02d}" for n in range(22)]
