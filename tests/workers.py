"""How `make test` shares the tests between its pytest-xdist workers (`--dist loadgroup`): a
file's tests stay together, as they share its fixtures. The browser tests' session fixtures (the
stand-in upstream's stack, tests/browser/conftest.py) set up once on each worker that runs one.

Each worker has its own test database (pytest-django) and Redis index (tests/settings.py).
Half the suite waits on processes it started, a stand-in's timed tokens or a browser, so two
workers keep both cores busy where one left them idle (three gained nothing: README).
"""

import pytest

from tests import llama_server

# The longest files, longest first (seconds of a worker in a full run on a 2-core AVX2 AMD EPYC,
# 2026-12-07): xdist hands groups out in the order they come, so these go first, to every
# worker, instead of one of them starting late and running alone at the end. Those answered by
# llama.cpp's server stay last whatever their length (tests/llama_server.py).
LONGEST_FIRST = (
    "tests/test_stack.py",  # 174 s
    "tests/test_stack_restarts.py",  # 109 s
    "tests/browser/test_resume.py",  # 107 s
    "tests/chat/test_real_model.py",  # 92 s
    "tests/browser/test_live_answers.py",  # 83 s
    "tests/reliability/test_soak.py",  # 74 s
    "tests/browser/test_held_and_refused_requests.py",  # 74 s
    "tests/browser/test_small_things.py",  # 60 s
    "tests/browser/test_chat_page.py",  # 50 s
    "tests/chat/test_inference_replica_processes.py",  # 45 s
    "tests/chat/test_stop_across_web_processes.py",  # 45 s
)


def group(items: list[pytest.Item]) -> None:
    """Marks each item with its group."""
    for item in items:
        item.add_marker(pytest.mark.xdist_group(group_of(item)))


def longest_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """The items, the longest groups first."""
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    return sorted(items, key=lambda item: (item.get_closest_marker(llama_server.MARK) is not None,
                                           rank.get(group_of(item), len(rank))))


def group_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]
