"""A search on SQLite (`make run`'s database) finds words whatever their case, in every script, as
on PostgreSQL: SQLite's own LIKE folds the case of ASCII letters only."""

import pytest
from django.db.utils import ConnectionHandler

from chatapp.models import Message


@pytest.fixture
def database(tmp_path, django_db_blocker):
    """A SQLite file of its own, outside the test database (which may be PostgreSQL)."""
    handler = ConnectionHandler({"default": {"ENGINE": "chatapp.runtime.sqlite_queue",
                                             "NAME": str(tmp_path / "search.sqlite3"), "OPTIONS": {}}})
    with django_db_blocker.unblock():
        with handler["default"].cursor() as cursor:
            cursor.execute("CREATE TABLE said (content TEXT)")
            for content in ("Émile Zola wrote it", "ÇA VA", "Ωμέγα", "50% off", "500 off", "a_b", "axb", None):
                cursor.execute("INSERT INTO said VALUES (%s)", [content])
        yield handler["default"]
        handler.close_all()


def found(database, query: str) -> list[str]:
    """What Django's icontains asks of SQLite (its own SQL and the pattern it escapes)."""
    lookup = Message._meta.get_field("content").get_lookup("icontains")
    pattern = "%" + database.ops.prep_for_like_query(query) + "%"
    with database.cursor() as cursor:
        cursor.execute(f"SELECT content FROM said WHERE content {database.operators[lookup.lookup_name]} "
                       "ORDER BY content", [pattern])
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.parametrize("query, rows", [
    ("émile", ["Émile Zola wrote it"]),
    ("ça va", ["ÇA VA"]),
    ("ΩΜΈΓΑ", ["Ωμέγα"]),
    ("ZOLA", ["Émile Zola wrote it"]),
    ("50%", ["50% off"]),  # a wildcard the user typed is a character
    ("a_b", ["a_b"]),
])
def test_a_search_finds_words_whatever_their_case_in_every_script(database, query, rows):
    assert found(database, query) == rows
