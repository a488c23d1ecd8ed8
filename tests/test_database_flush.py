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


@pytest.mark.django_db(transaction=True)
def test_a_flush_that_another_session_adds_a_linked_row_to_midway_is_made_again():
    """The flush (as pytest-django makes it: rows deleted, sequences kept) has emptied the
    referencing table and waits on a row of the referenced one that another session (a relay
    starting an answer as its test ends) holds; that session adds a row pointing at it and
    commits. The flush's deferred foreign-key check at its commit then finds the new row: the
    flush is made again, and takes that row too."""
    generation = factories.generation(finish_reason="stop")
    copied = [field.column for field in Generation._meta.concrete_fields if field.column != "id"]
    tables = sorted(connection.introspection.django_table_names(only_existing=True),
                    key=lambda table: table != "chatapp_generation")  # the referencing one first
    connection.ensure_connection()
    flushing_pid = connection.connection.info.backend_pid
    database_url = servers.shared_database_url()
    with psycopg.connect(database_url) as other, psycopg.connect(database_url, autocommit=True) as watcher:
        other.execute("SELECT 1 FROM chatapp_message WHERE id = %s FOR KEY SHARE", (generation.message_id,))

        def add_a_generation_to_the_message_then_commit():
            waiting.wait_until(lambda: waiting_for_a_lock(watcher, flushing_pid), 10, "the flush waiting")
            try:
                other.execute(f"INSERT INTO chatapp_generation ({', '.join(copied)}) SELECT "
                              f"{', '.join(copied).replace('request_id', 'gen_random_uuid()')}"
                              " FROM chatapp_generation WHERE id = %s", (generation.pk,))
            finally:
                other.commit()

        helper = threading.Thread(target=add_a_generation_to_the_message_then_commit)
        helper.start()
        connection.ops.execute_sql_flush(connection.ops.sql_flush(no_style(), tables))
        helper.join(30)

    assert Generation.objects.count() == Message.objects.count() == 0
