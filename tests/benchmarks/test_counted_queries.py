"""The watch benchmark's query count: each statement counted under the function of chatapp that
made it, a window's counts read between two samples, and the relay's own queries left out of
what watchers cost."""

import pytest
from django.db import connection

from benchmarks import counted_queries
from benchmarks.counted_queries import QueryCounts
from benchmarks.watch_bench import per_watcher_second
from chatapp import selectors
from tests import factories


@pytest.mark.django_db
def test_a_statement_is_counted_under_the_function_of_chatapp_that_made_it(monkeypatch):
    conversation = factories.conversation(owner=factories.user())
    monkeypatch.setattr(counted_queries, "_counts", counted_queries.collections.Counter())
    connection.ensure_connection()
    counted_queries._count_on(sender=None, connection=connection)
    counted_queries._count_on(sender=None, connection=connection)  # a connection made again: still once
    try:
        selectors.questions_before(conversation_id=conversation.pk, message_id=1)
    finally:
        connection.execute_wrappers.remove(counted_queries._counting)

    assert counted_queries._counts == {"chatapp.selectors.questions_before": 1}


def test_a_window_is_read_from_the_first_sample_in_it_to_the_last():
    counts = QueryCounts(path=None)
    counts.samples = [(0.5, {"a": 1}), (1.0, {"a": 2}), (2.0, {"a": 5, "b": 1}), (3.0, {"a": 9, "b": 1}), (3.5, {"a": 20})]

    assert counts.between(0.9, 3.2) == (2.0, {"a": 7, "b": 1})
    assert counts.between(1.1, 1.9) == (0.0, {})  # no two samples inside


def test_the_relays_own_queries_are_not_counted_against_the_watchers():
    made = {"chatapp.services.generations.generation_save_partials": 20, "chatapp.selectors.stop_requested": 1,
            "chatapp.selectors.generation_progress": 5}

    assert per_watcher_second(made, watchers=10, seconds=2.0) == 0.25
    assert per_watcher_second({"chatapp.services.generations._update_each": 40}, watchers=10, seconds=2.0) == 0
