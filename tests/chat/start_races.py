"""What the tests of an answer's start share: a request posted, a rival start's write held open
from another connection while the start goes on, and the upstream's first request awaited."""

import asyncio
import contextlib
import json
import threading

import pytest
from django.contrib.auth import get_user_model
from django.db import connections, transaction

from tests import factories


async def post(client, url, body=None):
    return await client.post(url, json.dumps(body or {}), content_type="application/json")


@contextlib.contextmanager
def user_row_locked(user, before_commit=lambda: None, lock=None):
    """Holds the user's row lock from another connection, as a rival start's write does (or
    `lock()`, another).

    Yields an event: once set, `before_commit` runs in that transaction and the lock goes.
    """
    locked, release = threading.Event(), threading.Event()

    def hold():
        try:
            with transaction.atomic():
                if lock is None:
                    get_user_model().objects.select_for_update().filter(pk=user.pk).exists()
                else:
                    lock()
                locked.set()
                release.wait(30)
                before_commit()
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold)
    holder.start()
    locked.wait(10)
    try:
        yield release
    finally:
        release.set()
        holder.join(10)


# A rival's write held open, and a start going on meanwhile, need row locks: on SQLite every write,
# a start's claim of its place too, waits for the file's write lock that the rival's write holds.
ROW_LOCKS = pytest.mark.skipif(connections["default"].vendor != "postgresql",
                               reason="row locks: PostgreSQL's DATABASE_URL")


async def upstream_requested(upstream) -> bool:
    return await asyncio.to_thread(upstream.requested.wait, 10)


def another_answer_said(conversation):
    """A rival start's rows: an answer said in the conversation meanwhile."""
    factories.message(conversation, role="assistant", content="meanwhile")
