"""How `make test` shares the tests between its two pytest-xdist workers (`-n 2 --dist
loadgroup`): a file's tests stay together, as they share its fixtures, and the browser tests
all go to one worker, as they share one session's stack and Chromium (tests/browser/conftest.py).

Each worker has its own test database (pytest-django) and Redis index (tests/settings.py).
Half the suite waits on processes it started, a stand-in's timed tokens or a browser, so two
workers keep both cores busy where one left them idle.
"""

import pytest

# Files whose tests share one worker's session fixtures, by the folder they live in.
SHARED_SESSION_FOLDERS = ("tests/browser/",)


def group(items: list[pytest.Item]) -> None:
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        name = next((folder for folder in SHARED_SESSION_FOLDERS if path.startswith(folder)), path)
        item.add_marker(pytest.mark.xdist_group(name))
