"""The test database is emptied between transactional tests by DELETE on PostgreSQL
(tests/postgresql_emptied_by_delete): rows linked by foreign keys go in any order, and the
next test starts from an empty database as after Django's own TRUNCATE and post_migrate (its
content types and permissions, kept rather than written again)."""

import re
import threading

import psycopg
import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
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
    left = {model._meta.db_table: model.objects.count() for model in apps.get_models()
            if model not in (ContentType, Permission)}
    assert set(left.values()) == {0}, left


@pytest.mark.django_db(transaction=True)
def test_a_flush_keeps_the_content_types_and_permissions_that_migrate_made():
    factories.staff_member()
    kept = set(ContentType.objects.values_list("pk", "app_label", "model"))
    permissions = set(Permission.objects.values_list("pk", "codename"))
    call_command("flush", interactive=False, verbosity=0, reset_sequences=False)  # as pytest-django's
    assert set(ContentType.objects.values_list("pk", "app_label", "model")) == kept
    assert set(Permission.objects.values_list("pk", "codename")) == permissions
    assert not get_user_model().user_permissions.through.objects.exists()  # the grant goes


def test_the_flush_takes_the_tables_then_deletes_their_rows_rather_than_truncating_them():
    tables = ["chatapp_message", "chatapp_generation", "auth_permission"]  # the last one kept
    statements = connection.ops.sql_flush(no_style(), tables)
    assert statements == ['LOCK TABLE "chatapp_message", "chatapp_generation" IN EXCLUSIVE MODE;',
                          'DELETE FROM "chatapp_message";', 'DELETE FROM "chatapp_generation";']


def waiting_for_a_lock(session, other_pid: int) -> bool:
    return session.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'",
                           (other_pid,)).fetchone()[0] == 1


@pytest.mark.django_db(transaction=True)
def test_a_flush_that_deadlocks_with_another_session_is_made_again_once_that_one_ended():
    generation = factories.generation(finish_reason="stop")
    deleted = [re.search(r'DELETE FROM "(\w+)"', statement)[1]
               for statement in sql_flush(no_style(), connection, reset_sequences=False)
               if statement.startswith("DELETE")]
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


@pytest.mark.django_db(transaction=True)
def test_a_flush_that_another_session_adds_a_linked_row_to_midway_leaves_no_row():
    """The flush (as pytest-django makes it: rows deleted, sequences kept) waits on a row of
    the messages that another session (a relay starting an answer as its test ends) holds; that
    session adds an answer's row pointing at it and commits. The flush holds every table by
    then, so one of the two is ended by PostgreSQL's deadlock check: the session's row is
    refused, or the flush is made again once that session's whole transaction has ended, and
    takes its row too. It used to delete as it went and find the new row only at its commit;
    under load, the session's commit was still on its way as the flush began again, and the
    row failed the flush's next tries the same way."""
    generation = factories.generation(finish_reason="stop")
    copied = [field.column for field in Generation._meta.concrete_fields if field.column != "id"]
    tables = sorted(connection.introspection.django_table_names(only_existing=True),
                    key=lambda table: table != "chatapp_generation")  # the referencing one first
    connection.ensure_connection()
    flushing_pid = connection.connection.info.backend_pid
    database_url = servers.shared_database_url()
    ended = []
    with psycopg.connect(database_url) as other, psycopg.connect(database_url, autocommit=True) as watcher:
        other.execute("SELECT 1 FROM chatapp_message WHERE id = %s FOR KEY SHARE", (generation.message_id,))

        def add_a_generation_to_the_message_then_commit():
            waiting.wait_until(lambda: waiting_for_a_lock(watcher, flushing_pid), 10, "the flush waiting")
            try:
                other.execute(f"INSERT INTO chatapp_generation ({', '.join(copied)}) SELECT "
                              f"{', '.join(copied).replace('request_id', 'gen_random_uuid()')}"
                              " FROM chatapp_generation WHERE id = %s", (generation.pk,))
                other.commit()
            except psycopg.errors.DeadlockDetected as error:  # this session was the one ended
                ended.append(error)
                other.rollback()

        helper = threading.Thread(target=add_a_generation_to_the_message_then_commit)
        helper.start()
        connection.ops.execute_sql_flush(connection.ops.sql_flush(no_style(), tables))
        helper.join(30)

    assert not helper.is_alive()
    assert Generation.objects.count() == Message.objects.count() == 0
