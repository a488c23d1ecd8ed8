"""How `make test` shares the tests between its two pytest-xdist workers (`-n 2 --dist
loadgroup`): a file's tests stay together, as they share its fixtures, and the browser tests
all go to one worker, as they share one session's stack and Chromium (tests/browser/conftest.py).

Each worker has its own test database (pytest-django) and Redis index (tests/settings.py).
Half the suite waits on processes it started, a stand-in's timed tokens or a browser, so two
workers keep both cores busy where one left them idle.
"""

import pytest

from tests import llama_server

# Files whose tests share one worker's session fixtures, by the folder they live in.
SHARED_SESSION_FOLDERS = ("tests/browser/",)
# The longest groups, longest first (seconds in a full run on this 2-core machine, 2026-12-02):
# xdist hands groups out in the order they come, so these go first, to both workers, instead
# of one of them starting late and running alone at the end. Those answered by llama.cpp's
# server stay last whatever their length (tests/llama_server.py).
LONGEST_FIRST = (
    "tests/test_stack_restarts.py",  # 277 s in the run that left this order unset
    "tests/browser/",  # 247 s
    "tests/test_stack.py",  # 80 s
    "tests/reliability/test_soak.py",  # 53 s
    "tests/chat/test_real_model.py",  # 50 s
    "tests/chat/test_sign_out_across_web_processes.py",  # 36 s alone (2026-12-07)
    "tests/chat/test_stop_across_web_processes.py",  # 32 s
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
    path = item.nodeid.split("::", 1)[0]
    return next((folder for folder in SHARED_SESSION_FOLDERS if path.startswith(folder)), path)
