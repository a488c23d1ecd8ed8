"""SQLite's writers queue in Python within a process, and every way out of a transaction frees it."""

import threading

import pytest
from django.db.utils import ConnectionHandler


@pytest.fixture
def database(tmp_path, django_db_blocker):
    """A SQLite file of its own, outside the test database (which may be PostgreSQL)."""
    queued = {"ENGINE": "chatapp.runtime.sqlite_queue", "NAME": str(tmp_path / "queued.sqlite3"),
              "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 5}}
    handler = ConnectionHandler({"default": queued, "queued": queued})
    with django_db_blocker.unblock():
        with handler["queued"].cursor() as cursor:
            cursor.execute("CREATE TABLE counter (n INTEGER)")
            cursor.execute("INSERT INTO counter VALUES (0)")
        yield handler
        handler.close_all()


def in_transaction(connection, work, end="commit"):
    """What transaction.atomic does on SQLite: BEGIN under autocommit, then commit or roll back."""
    connection.set_autocommit(False, force_begin_transaction_with_broken_autocommit=True)
    try:
        with connection.cursor() as cursor:
            work(cursor)
        connection.commit() if end == "commit" else connection.rollback()
    finally:
        connection.set_autocommit(True)


def increment(cursor):
    cursor.execute("SELECT n FROM counter")
    (n,) = cursor.fetchone()
    cursor.execute("UPDATE counter SET n = %s", [n + 1])


def count(database) -> int:
    with database["queued"].cursor() as cursor:
        cursor.execute("SELECT n FROM counter")
        return cursor.fetchone()[0]


def test_concurrent_read_modify_write_transactions_all_land(database):
    errors = []

    def writer():
        try:
            for _ in range(10):
                in_transaction(database["queued"], increment)  # each thread: its own connection
        except Exception as error:  # noqa: BLE001 - collected for the assertion
            errors.append(error)
        finally:
            database["queued"].close()

    threads = [threading.Thread(target=writer) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert count(database) == 120  # no lost update, no "database is locked"


def test_a_rolled_back_or_closed_transaction_lets_the_next_writer_in(database):
    connection = database["queued"]
    in_transaction(connection, increment, end="rollback")
    connection.set_autocommit(False, force_begin_transaction_with_broken_autocommit=True)
    connection.close()  # abandoned mid-transaction

    other = []
    thread = threading.Thread(target=lambda: (in_transaction(database["queued"], increment),
                                              other.append(count(database)),
                                              database["queued"].close()))
    thread.start()
    thread.join()

    assert other == [1]
