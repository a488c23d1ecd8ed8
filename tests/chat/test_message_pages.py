"""A conversation's messages are read a page at a time: the newest first, older ones by a cursor."""

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from chatapp import selectors
from chatapp.models import Message
from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)


def messages_in(conversation, count: int, *, at=None) -> list[int]:
    """`count` alternating questions and answers, oldest first; their ids. All written at one
    moment (`at`) where given, so that only their ids order them."""
    rows = [Message(conversation=conversation, role="user" if i % 2 == 0 else "assistant",
                    content=f"message {i}") for i in range(count)]
    made = Message.objects.bulk_create(rows)
    if at is not None:
        Message.objects.filter(pk__in=[m.pk for m in made]).update(created_at=at)
    return [m.pk for m in made]


async def pages_of(api, conversation, limit=None) -> list[dict]:
    """Every page, newest first, each followed by the cursor the one before it gave."""
    url = f"/api/conversations/{conversation.pk}/messages"
    query = {} if limit is None else {"limit": limit}
    pages = [(await api.get(url, query)).json()]
    while pages[-1]["has_older"]:
        before = pages[-1]["results"][0]["id"]
        pages.append((await api.get(url, {**query, "before": before})).json())
    return pages


async def test_a_long_conversation_answers_its_newest_page_and_whether_older_ones_exist(api, conversation):
    ids = await sync_to_async(messages_in)(conversation, selectors.MESSAGE_PAGE_SIZE + 7)

    newest = (await api.get(f"/api/conversations/{conversation.pk}/messages")).json()

    assert [m["id"] for m in newest["results"]] == ids[-selectors.MESSAGE_PAGE_SIZE:]
    assert newest["has_older"] is True
    assert newest["conversation"]["id"] == conversation.pk


async def test_older_pages_chain_back_to_the_first_message_with_no_gap_and_no_repeat(api, conversation):
    ids = await sync_to_async(messages_in)(conversation, 23)

    pages = await pages_of(api, conversation, limit=5)

    assert [len(p["results"]) for p in pages] == [5, 5, 5, 5, 3]
    assert [m["id"] for p in reversed(pages) for m in p["results"]] == ids
    assert [p["has_older"] for p in pages] == [True, True, True, True, False]


async def test_messages_written_at_one_moment_are_paged_in_the_order_of_their_ids(api, conversation):
    # The list's order is (created_at, id): a cursor that read created_at alone would skip these.
    ids = await sync_to_async(messages_in)(conversation, 9, at=timezone.now())

    pages = await pages_of(api, conversation, limit=4)

    assert [m["id"] for p in reversed(pages) for m in p["results"]] == ids


async def test_a_conversation_that_fits_one_page_has_no_older_page(api, conversation):
    ids = await sync_to_async(messages_in)(conversation, 3)

    listed = (await api.get(f"/api/conversations/{conversation.pk}/messages")).json()

    assert [m["id"] for m in listed["results"]] == ids
    assert listed["has_older"] is False


async def test_the_page_before_the_first_message_is_empty(api, conversation):
    ids = await sync_to_async(messages_in)(conversation, 3)

    listed = (await api.get(f"/api/conversations/{conversation.pk}/messages", {"before": ids[0]})).json()

    assert listed["results"] == [] and listed["has_older"] is False


@pytest.mark.parametrize("limit", ["0", "-1", "x", "1.5", "", str(selectors.MAX_MESSAGE_PAGE_SIZE + 1), "9" * 5000])
async def test_a_limit_out_of_bounds_is_refused_with_400(api, conversation, limit):
    response = await api.get(f"/api/conversations/{conversation.pk}/messages", {"limit": limit})

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_value"


@pytest.mark.parametrize("before", ["x", "-3", "0", "", "1e3", "9" * 5000])
async def test_a_malformed_cursor_is_refused_with_400(api, conversation, before):
    response = await api.get(f"/api/conversations/{conversation.pk}/messages", {"before": before})

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_cursor"


async def test_a_cursor_naming_a_message_of_another_conversation_is_refused_and_reveals_nothing(
        api, conversation, other_user):
    def theirs():
        elsewhere = factories.conversation(owner=other_user)
        return factories.message(elsewhere, content="secret").pk
    their_message = await sync_to_async(theirs)()
    await sync_to_async(messages_in)(conversation, 3)

    response = await api.get(f"/api/conversations/{conversation.pk}/messages", {"before": their_message})

    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_cursor"
    assert "secret" not in response.content.decode()


async def test_another_users_conversation_is_404_whatever_the_cursor(api, other_user):
    def theirs():
        elsewhere = factories.conversation(owner=other_user)
        return elsewhere, factories.message(elsewhere, content="secret").pk
    elsewhere, their_message = await sync_to_async(theirs)()

    response = await api.get(f"/api/conversations/{elsewhere.pk}/messages", {"before": their_message})

    assert response.status_code == 404 and "secret" not in response.content.decode()
