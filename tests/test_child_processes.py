"""`make check` runs exactly the tests that start no child process, and the guard keeps it so."""

import re
import subprocess

import pytest

from harness.child_process import REPO_DIR
from tests import child_processes


def test_make_check_leaves_out_exactly_the_marks_the_guard_lets_start_processes():
    recipe = (REPO_DIR / "Makefile").read_text().split("\ncheck:", 1)[1].split("\n\n", 1)[0]
    selection = re.search(r'pytest .*-m "([^"]+)"', recipe).group(1)

    assert set(re.findall(r"not (\w+)", selection)) == set(child_processes.LEFT_OUT_OF_CHECK)
    assert selection.count(" and ") == len(child_processes.LEFT_OUT_OF_CHECK) - 1


def test_a_test_that_make_check_runs_cannot_start_a_child_process():
    with pytest.raises(RuntimeError, match="without the `process` mark"):
        subprocess.run(["true"], check=True)


@pytest.mark.process
def test_a_test_marked_process_may_start_one():
    assert subprocess.run(["true"]).returncode == 0
