"""A conversation's title comes from its first message, and follows an edit of it, until the
user names the conversation."""

import json

import pytest
from asgiref.sync import sync_to_async

from chatapp.models import Conversation
from tests.chat.streams import read_events

pytestmark = pytest.mark.django_db(transaction=True)


async def post(api, url, body) -> list:
    return await read_events(await api.post(url, json.dumps(body), content_type="application/json"))


async def rename(api, conversation_id: int, title: str):
    return await api.patch(f"/api/conversations/{conversation_id}", {"title": title},
                           content_type="application/json")


async def title_of(conversation_id: int) -> str:
    return (await sync_to_async(Conversation.objects.get)(pk=conversation_id)).title


async def two_questions(api, conversation_id: int) -> list[int]:
    """Asks two questions; returns the ids of the two user messages."""
    await post(api, f"/api/conversations/{conversation_id}/messages", {"content": "Soup recipes\nquick ones"})
    await post(api, f"/api/conversations/{conversation_id}/messages", {"content": "And bread?"})
    listed = (await api.get(f"/api/conversations/{conversation_id}/messages")).json()["results"]
    return [m["id"] for m in listed if m["role"] == "user"]


async def test_editing_the_first_message_retitles_a_conversation_the_user_did_not_name(
        api, conversation, upstream):
    first, _ = await two_questions(api, conversation.pk)
    before = await title_of(conversation.pk)

    await post(api, f"/api/messages/{first}/edit", {"content": "  Salad ideas\nfor summer"})

    assert before == "Soup recipes"
    assert await title_of(conversation.pk) == "Salad ideas"


async def test_a_conversation_the_user_renamed_keeps_its_name_when_the_first_message_is_edited(
        api, conversation, upstream):
    first, _ = await two_questions(api, conversation.pk)
    await rename(api, conversation.pk, "My soups")

    await post(api, f"/api/messages/{first}/edit", {"content": "Salad ideas"})

    assert await title_of(conversation.pk) == "My soups"


async def test_a_conversation_created_with_a_name_keeps_it_when_the_first_message_is_edited(api, upstream):
    created = (await api.post("/api/conversations", {"title": "Kitchen"}, content_type="application/json")).json()
    first, _ = await two_questions(api, created["id"])

    await post(api, f"/api/messages/{first}/edit", {"content": "Salad ideas"})

    assert await title_of(created["id"]) == "Kitchen"


async def test_editing_a_later_message_leaves_the_title(api, conversation, upstream):
    _, second = await two_questions(api, conversation.pk)

    await post(api, f"/api/messages/{second}/edit", {"content": "And cakes?"})

    assert await title_of(conversation.pk) == "Soup recipes"


async def test_a_name_cleared_by_the_user_gives_the_title_back_to_the_first_message(
        api, conversation, upstream):
    first, _ = await two_questions(api, conversation.pk)
    await rename(api, conversation.pk, "My soups")
    await rename(api, conversation.pk, "")

    await post(api, f"/api/messages/{first}/edit", {"content": "Salad ideas"})

    assert await title_of(conversation.pk) == "Salad ideas"


async def test_a_name_cleared_by_the_user_gives_the_title_back_to_the_first_message_not_the_next_one_sent(
        api, conversation, upstream):
    await two_questions(api, conversation.pk)
    await rename(api, conversation.pk, "My soups")
    cleared = (await rename(api, conversation.pk, "")).json()

    await post(api, f"/api/conversations/{conversation.pk}/messages", {"content": "And cakes?"})

    assert cleared["title"] == "Soup recipes"
    assert await title_of(conversation.pk) == "Soup recipes"


def test_the_migration_marks_titles_that_are_not_the_first_messages_as_chosen_by_the_user(transactional_db):
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before, after = [("chatapp", "0003_generation_status")], [("chatapp", "0004_conversation_title_set_by_user")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    owner = old.get_model("auth", "User").objects.create(username="old-timer")
    Conversation, Message = old.get_model("chatapp", "Conversation"), old.get_model("chatapp", "Message")
    ids = {}
    for title, first in [("Soup recipes", "Soup recipes\nquick"), ("My soups", "Soup recipes"), ("", "Hi"),
                         ("Empty so far", None)]:
        conversation = Conversation.objects.create(owner_id=owner.pk, title=title)
        if first is not None:
            Message.objects.create(conversation=conversation, role="user", content=first)
        ids[title] = conversation.pk

    executor = MigrationExecutor(connection)
    executor.migrate(after)
    migrated = executor.loader.project_state(after).apps.get_model("chatapp", "Conversation")
    chosen = {title: migrated.objects.get(pk=pk).title_set_by_user for title, pk in ids.items()}
    # Back to the newest schema: the tests after this one need its columns.
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())

    assert chosen == {"Soup recipes": False, "My soups": True, "": False, "Empty so far": True}


def test_a_rename_made_while_the_first_answer_starts_is_kept_and_the_first_line_titles_otherwise(
        django_user_model):
    from chatapp import services

    owner = django_user_model.objects.create_user("titled", password="pw-0123456789")
    renamed, untouched = (services.conversation_create(owner=owner) for _ in range(2))
    plans = [services.message_send(user=owner, conversation=c, content="Soup recipes\nquick")
             for c in (renamed, untouched)]
    services.conversation_update(conversation=Conversation.objects.get(pk=renamed.pk), title="Mine")
    for plan in plans:
        services.answer_write(plan=plan)
    assert [Conversation.objects.get(pk=c.pk).title for c in (renamed, untouched)] == ["Mine", "Soup recipes"]


@pytest.mark.parametrize("content, title", [
    ("Soup recipes\nquick ones", "Soup recipes"),
    ("\u200b\nSoup recipes", "Soup recipes"),  # a first line with nothing to show is no title
    ("\u202e\u200b \n\n  Soup\trecipes", "Soup recipes"),
    ("\u200b", ""),
])
def test_the_first_message_titles_by_its_first_line_that_shows_something(content, title):
    from chatapp.services.conversations import title_from

    assert title_from(content) == title


@pytest.mark.parametrize("line, title", [
    # A family is one picture: not its father alone.
    ("a" * 79 + "👨\u200d👩\u200d👧\u200d👦 family", "a" * 79),
    # A flag is two letters: one alone shows as a boxed letter.
    ("a" * 79 + "🇫🇷 France", "a" * 79),
    ("a" * 78 + "🇫🇷 France", "a" * 78 + "🇫🇷"),
    # An accent stays on its letter, a skin tone on its hand.
    ("a" * 79 + "e\u0301t\u00e9", "a" * 79),
    ("a" * 78 + "e\u0301t\u00e9", "a" * 78 + "e\u0301"),
    ("a" * 79 + "👍🏽 fine", "a" * 79),
    # A cut before a space leaves none at the end.
    ("a" * 79 + " and more", "a" * 79),
])
def test_a_first_line_over_80_characters_is_cut_between_characters_as_they_show(line, title):
    from chatapp.services.conversations import title_from

    assert title_from(line) == title
