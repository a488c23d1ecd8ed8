"""The test database is emptied between transactional tests by DELETE on PostgreSQL
(tests/postgresql_emptied_by_delete): rows linked by foreign keys go in any order, and the
next test starts from an empty database as after Django's own TRUNCATE."""

import re
import threading

import psycopg
import pytest
from django.apps import apps
from django.core.management import call_command
from django.core.management.color import no_style
from django.core.management.sql import sql_flush
from django.db import connection

from chatapp.models import Generation, Message
from harness import waiting
from tests import factories, servers

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's flush")


@pytest.mark.django_db(transaction=True)
def test_a_flush_empties_every_table_with_rows_linked_across_them():
    factories.generation(finish_reason="stop")
    call_command("flush", interactive=False, verbosity=0, inhibit_post_migrate=True)
    left = {model._meta.db_table: model.objects.count() for model in apps.get_models()}
    assert set(left.values()) == {0}, left


def test_the_flush_deletes_rows_rather_than_truncating_tables():
    statements = connection.ops.sql_flush(no_style(), ["chatapp_message"])
    assert statements == ['DELETE FROM "chatapp_message";']


def waiting_for_a_lock(session, other_pid: int) -> bool:
    return session.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'",
                           (other_pid,)).fetchone()[0] == 1


@pytest.mark.django_db(transaction=True)
def test_a_flush_that_deadlocks_with_another_session_is_made_again_once_that_one_ended():
    generation = factories.generation(finish_reason="stop")
    deleted = [re.search(r'"(\w+)"', statement)[1] for statement in sql_flush(no_style(), connection, reset_sequences=False)]
    # Another session (a stack's relay writing an answer's rows) locks a row of the table the
    # flush deletes later, then, with the flush waiting on it, one the flush already deleted.
    (earlier, earlier_pk), (later, later_pk) = sorted(
        [("chatapp_generation", generation.pk), ("chatapp_message", generation.message_id)],
        key=lambda table_pk: deleted.index(table_pk[0]))
    connection.ensure_connection()
    flushing_pid = connection.connection.info.backend_pid
    database_url = servers.shared_database_url()
    with psycopg.connect(database_url) as other, psycopg.connect(database_url, autocommit=True) as watcher:
        other.execute(f"SELECT 1 FROM {later} WHERE id = %s FOR UPDATE", (later_pk,))

        def lock_the_other_row_then_end():
            waiting.wait_until(lambda: waiting_for_a_lock(watcher, flushing_pid), 10, "the flush waiting")
            try:
                other.execute(f"SELECT 1 FROM {earlier} WHERE id = %s FOR UPDATE", (earlier_pk,))
            finally:
                other.rollback()

        helper = threading.Thread(target=lock_the_other_row_then_end)
        helper.start()
        call_command("flush", interactive=False, verbosity=0, inhibit_post_migrate=True)
        helper.join(30)

    assert Generation.objects.count() == Message.objects.count() == 0
