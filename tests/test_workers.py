"""`make test` shares the tests between two workers a file at a time (tests/workers.py)."""

import pytest


def test_this_test_goes_to_a_worker_with_the_rest_of_its_file(request):
    if not request.config.getvalue("loadgroup"):
        pytest.skip("runs under `--dist loadgroup` only, as `make test` and `make check` run it")
    # A test without its group's name goes out alone: its file's module fixtures (a whole stack,
    # the browser's session) were then set up on both workers, seen in a full run.
    assert request.node.nodeid.endswith("@tests/test_workers.py")
