"""The `process` mark: a test that starts a child process (daphne, nginx, the inference service,
Chromium, the stack, a `manage.py` command) says so, and `make check` leaves it out, with the
tests marked slow, llama_cpp or fuzz (LEFT_OUT_OF_CHECK).

The mark is kept true: while a test that `make check` runs sets up or runs, starting a child
process from the main thread raises at once, naming the test. Threads are left alone (the
llama.cpp build runs in the background during the whole session). Tests that ask for a fixture
in PROCESS_FIXTURES are marked without saying so, wherever the fixture hides in their closure.
"""

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

MARK = "process"
# The Makefile's `check` deselects exactly these (tests/test_child_processes.py holds it to that).
LEFT_OUT_OF_CHECK = (MARK, "slow", "llama_cpp", "fuzz")

# Fixtures that start a child process.
PROCESS_FIXTURES = frozenset({"probe_app_port", "nginx_binary", "chromium", "restartable_redis"})

# The audit events of starting a child (sys.addaudithook; Python's own table of events).
_SPAWN_EVENTS = frozenset({"subprocess.Popen", "os.posix_spawn", "os.spawn", "os.fork",
                           "os.forkpty", "os.system"})

_unmarked_item: pytest.Item | None = None


def mark(items: list[pytest.Item]) -> None:
    for item in items:
        if PROCESS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(MARK)


def refuse_in_unmarked_tests() -> None:
    sys.addaudithook(_refuse_unmarked)


@contextmanager
def watching(item: pytest.Item) -> Iterator[None]:
    """Within the block, `item` may start a child process only if `make check` leaves it out."""
    global _unmarked_item
    left_out = any(item.get_closest_marker(mark) for mark in LEFT_OUT_OF_CHECK)
    _unmarked_item = None if left_out else item
    try:
        yield
    finally:
        _unmarked_item = None


def _refuse_unmarked(event: str, args: tuple) -> None:
    if (event in _SPAWN_EVENTS and _unmarked_item is not None
            and threading.current_thread() is threading.main_thread()):
        item = _unmarked_item
        raise RuntimeError(
            f"{item.nodeid} starts a child process ({event} {str(args[:2])[:200]}) without the "
            f"`{MARK}` mark: mark it (pytestmark or @pytest.mark.{MARK}) so that `make check` "
            "leaves it out")
