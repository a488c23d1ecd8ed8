"""What one user may hold of a web process at once: a search of their own text takes one of the
process's database threads at a time, and watch streams a bounded number of its connections, so
that one user's searches or floods of watches leave the others served (the review: eight long
searches held every database thread for 37-40 s, and 2,100 watch streams ran nginx out of
connections, while another user waited)."""

import asyncio
import contextlib
import gc
import threading

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient

from chatapp import selectors
from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)


async def test_a_search_longer_than_the_search_box_allows_is_refused_before_it_runs(api):
    within = await api.get("/api/conversations", {"q": "é" * 500})
    beyond = await api.get("/api/conversations", {"q": "é" * 501})

    assert within.status_code == 200
    assert beyond.status_code == 400 and beyond.json()["error"]["code"] == "query_too_long"
    assert "500" in beyond.json()["error"]["message"]


async def test_one_users_searches_run_one_at_a_time_while_another_users_go_on(api, other_user, monkeypatch):
    entered, go_on = [], threading.Event()
    real = selectors.conversation_list

    def stalled_search(*, user, query="", after=None):  # a search that takes as long as the test says
        entered.append(user.pk)
        go_on.wait(30)
        return real(user=user, query=query, after=after)
    monkeypatch.setattr(selectors, "conversation_list", stalled_search)
    other = AsyncClient()
    await other.aforce_login(other_user)
    user_id = (await api.get("/api/auth/session")).json()["user"]["id"]

    mine = [asyncio.create_task(api.get("/api/conversations", {"q": "aaaa"})) for _ in range(2)]
    while user_id not in entered:
        await asyncio.sleep(0.01)
    theirs = asyncio.create_task(other.get("/api/conversations", {"q": "aaaa"}))
    while other_user.pk not in entered:
        await asyncio.sleep(0.01)

    assert entered.count(user_id) == 1, "the second search waits for the first"
    go_on.set()
    answers = await asyncio.gather(*mine, theirs)
    assert [answer.status_code for answer in answers] == [200, 200, 200]
    assert entered.count(user_id) == 2


async def following(response, heard: asyncio.Event) -> None:
    async for _ in response.streaming_content:
        heard.set()


async def test_a_users_watch_streams_are_bounded_and_a_closed_or_dropped_one_frees_its_place(
        api, conversation, settings):
    settings.CHAT_MAX_WATCHES_PER_USER = 2
    answer = await sync_to_async(factories.generation)(
        await sync_to_async(factories.message)(conversation, role="assistant", status="streaming"))
    url = f"/api/generations/{answer.pk}/events"

    first, second = await api.get(url), await api.get(url)
    third = await api.get(url)
    assert (first.status_code, second.status_code) == (200, 200)
    assert third.status_code == 429 and third.json()["error"]["code"] == "too_many_watches"
    assert third["Retry-After"]

    heard = asyncio.Event()
    reading = asyncio.create_task(following(first, heard))
    await heard.wait()
    reading.cancel()  # the page closed its watch: Django cancels the task that streams it
    with contextlib.suppress(asyncio.CancelledError):
        await reading
    fourth = await api.get(url)
    assert fourth.status_code == 200
    assert (await api.get(url)).status_code == 429  # the second and the fourth hold both places
    del second  # a watch whose page left before its stream began: never read, then dropped
    gc.collect()
    fifth = await api.get(url)
    assert fifth.status_code == 200
