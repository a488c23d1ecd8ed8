"""The test database is emptied between transactional tests by DELETE on PostgreSQL
(tests/postgresql_emptied_by_delete): rows linked by foreign keys go in any order, and the
next test starts from an empty database as after Django's own TRUNCATE."""

import pytest
from django.apps import apps
from django.core.management import call_command
from django.core.management.color import no_style
from django.db import connection

from tests import factories

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
