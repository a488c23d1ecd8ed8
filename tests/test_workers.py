"""`make test` shares the tests between two workers a file at a time (tests/workers.py)."""

import pytest

from tests import llama_server, workers


def test_this_test_goes_to_a_worker_with_the_rest_of_its_file(request):
    if not request.config.getvalue("loadgroup"):
        pytest.skip("runs under `--dist loadgroup` only, as `make test` and `make check` run it")
    # A test without its group's name goes out alone: its file's module fixtures (a whole stack,
    # the browser's session) were then set up on both workers, seen in a full run.
    assert request.node.nodeid.endswith("@tests/test_workers.py")


def test_the_longest_groups_run_first_whatever_else_reorders_the_tests(request):
    # pytest-django sorts the tests by how they use the database (Django's own order); applied
    # after tests/workers.py's order, it sent the longest groups, which use none, out last.
    groups = list(dict.fromkeys(workers.group_of(item) for item in request.session.items
                                if item.get_closest_marker(llama_server.MARK) is None))
    longest = [group for group in workers.LONGEST_FIRST if group in groups]
    if not longest:
        pytest.skip("none of the longest groups is collected in this run")

    assert groups[:len(longest)] == longest
