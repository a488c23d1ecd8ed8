"""The conversation list is read a page at a time, newest first, each page after a cursor: the
place of the last conversation shown, which a delete or a move elsewhere does not shift."""

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from chatapp import selectors
from chatapp.models import Conversation
from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)


def conversations_of(user, count: int, *, title="conv", at=None) -> list[int]:
    """`count` conversations, the newest first; their ids. All updated at one moment (`at`)
    where given, so that only their ids order them."""
    made = [factories.conversation(owner=user, title=f"{title} {n:02d}") for n in range(count)][::-1]
    if at is not None:
        Conversation.objects.filter(pk__in=[c.pk for c in made]).update(updated_at=at)
    return [c.pk for c in made]


async def pages_of(api, query=None) -> list[dict]:
    """Every page, newest first, each read after the cursor the one before it gave."""
    query = query or {}
    pages = [(await api.get("/api/conversations", query)).json()]
    while pages[-1]["next"] is not None:
        pages.append((await api.get("/api/conversations", {**query, "after": pages[-1]["next"]})).json())
    return pages


def ids_in(page: dict) -> list[int]:
    return [c["id"] for c in page["results"]]


async def test_a_conversation_deleted_elsewhere_from_the_page_shown_makes_the_next_page_skip_none(api, user):
    ids = await sync_to_async(conversations_of)(user, 25)
    first = (await api.get("/api/conversations")).json()
    await api.delete(f"/api/conversations/{ids[3]}")  # another device: this one still shows it

    after = (await api.get("/api/conversations", {"after": first["next"]})).json()

    assert ids_in(first) == ids[:20]
    assert ids_in(after) == ids[20:]  # the 21st too, which numbered pages moved onto the first
    assert after["next"] is None


async def test_a_conversation_moved_to_the_top_elsewhere_is_listed_once(api, user):
    ids = await sync_to_async(conversations_of)(user, 25)
    first = (await api.get("/api/conversations")).json()
    await sync_to_async(lambda: Conversation.objects.get(pk=ids[22]).save())()  # an answer there, elsewhere

    after = (await api.get("/api/conversations", {"after": first["next"]})).json()
    first_again = (await api.get("/api/conversations")).json()

    assert ids_in(after) == ids[20:22] + ids[23:]  # not the first page's last again
    assert ids_in(first_again)[0] == ids[22]  # where a first page read again finds it


async def test_pages_chain_to_the_last_conversation_with_no_gap_and_no_repeat(api, user):
    ids = await sync_to_async(conversations_of)(user, 45)

    pages = await pages_of(api)

    assert [len(p["results"]) for p in pages] == [20, 20, 5]
    assert [i for p in pages for i in ids_in(p)] == ids


async def test_a_list_of_whole_pages_ends_with_its_last_page_not_an_empty_one(api, user):
    ids = await sync_to_async(conversations_of)(user, 2 * selectors.PAGE_SIZE)

    pages = await pages_of(api)

    assert [ids_in(p) for p in pages] == [ids[:20], ids[20:]]


async def test_conversations_updated_at_one_moment_are_paged_in_the_order_of_their_ids(api, user):
    # The list's order is (updated_at, id): a cursor that read updated_at alone would skip these.
    ids = await sync_to_async(conversations_of)(user, 25, at=timezone.now())

    pages = await pages_of(api)

    assert [i for p in pages for i in ids_in(p)] == sorted(ids, reverse=True)


async def test_a_search_pages_the_same_way(api, user):
    def make():
        factories.conversation(owner=user, title="Recipes")
        return conversations_of(user, 23, title="Trip")
    trips = await sync_to_async(make)()

    pages = await pages_of(api, {"q": "trip"})

    assert [i for p in pages for i in ids_in(p)] == trips


async def test_the_place_after_a_conversation_stays_once_it_is_gone(api, user):
    ids = await sync_to_async(conversations_of)(user, 25)
    first = (await api.get("/api/conversations")).json()
    await api.delete(f"/api/conversations/{ids[19]}")  # the one the cursor names

    after = (await api.get("/api/conversations", {"after": first["next"]})).json()

    assert ids_in(after) == ids[20:]


@pytest.mark.parametrize("cursor", ["x", "", "1", "1.2.3", ".5", "5.", "-1.5", "1.-5", "1e3.5", "١٢.٣",
                                    "9" * 5000 + ".1", "1." + "9" * 5000, "99999999999999999999.1"],
                         ids=lambda cursor: cursor if len(cursor) < 24 else f"{cursor[:4]}…{len(cursor)}")
async def test_a_malformed_cursor_is_refused_with_400(api, cursor):
    response = await api.get("/api/conversations", {"after": cursor})

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_cursor"


async def test_a_malformed_cursor_is_refused_before_the_search_is_read(api):
    response = await api.get("/api/conversations", {"after": "x", "q": "a" * 501})

    assert response.json()["error"]["code"] == "invalid_cursor"


async def test_a_page_number_past_the_first_is_refused_with_the_cursor_to_use_instead(api):
    response = await api.get("/api/conversations", {"page": "2"})

    assert response.status_code == 400
    assert "after" in response.json()["error"]["message"]


async def test_the_first_page_asked_by_number_is_the_first_page_as_a_page_from_before_the_cursor_asks(api, user):
    ids = await sync_to_async(conversations_of)(user, 21)

    response = await api.get("/api/conversations", {"page": "1", "q": ""})

    assert response.status_code == 200 and ids_in(response.json()) == ids[:20]


async def test_another_users_conversations_are_never_after_a_cursor(api, user, other_user):
    def make():
        conversations_of(other_user, 5, title="Private")
        return conversations_of(user, 21)
    ids = await sync_to_async(make)()

    pages = await pages_of(api)

    assert [i for p in pages for i in ids_in(p)] == ids
