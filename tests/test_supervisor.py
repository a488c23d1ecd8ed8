"""The supervisor of `make run` starts a crashed child again, waiting longer after each crash in a
row, while the other children run on; stopping it stops them all. Real processes (`sleep`,
`false`), no model: the whole stack's version is tests/test_stack_restarts.py."""

import io
import os
import re
import signal
import subprocess
import sys
import threading
from contextlib import contextmanager

import psutil
import pytest

from harness import waiting
from harness.child_process import REPO_DIR
from stack.supervisor import Backoff, Prerequisite, Supervisor


def test_restart_delays_double_from_the_first_up_to_the_cap():
    backoff = Backoff(first_s=1, cap_s=10)

    assert [backoff.delay_s(crashes) for crashes in range(1, 7)] == [1, 2, 4, 8, 10, 10]


@contextmanager
def supervising(tmp_path, backoff: Backoff, after: dict[str, Prerequisite] | None = None,
                **commands):
    supervisor = Supervisor(cwd=tmp_path, pid_dir=tmp_path / "run", backoff=backoff, out=io.StringIO())
    for name, command in commands.items():
        supervisor.add(name, command, (after or {}).get(name))
    result = {}
    thread = threading.Thread(target=lambda: result.update(status=supervisor.run()))
    thread.start()
    try:
        yield supervisor, result
    finally:
        supervisor.stop()
        thread.join(timeout=30)


def pid_in(tmp_path, name: str) -> int | None:
    try:
        return int((tmp_path / "run" / f"{name}.pid").read_text())
    except (FileNotFoundError, ValueError):
        return None


def alive(pid: int) -> bool:
    """Not ended: a child the supervisor no longer reaps (it was killed) waits as a zombie for
    whoever adopted it."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_killed_child_comes_back_under_a_new_pid_while_the_other_runs_on(tmp_path):
    backoff = Backoff(first_s=0.05, cap_s=0.2, healthy_after_s=60)
    with supervising(tmp_path, backoff, web=["sleep", "600"], inference=["sleep", "600"]) as (supervisor, _):
        waiting.wait_until(lambda: pid_in(tmp_path, "web") and pid_in(tmp_path, "inference"), 10, "both to start")
        web_pid, inference_pid = pid_in(tmp_path, "web"), pid_in(tmp_path, "inference")

        os.kill(inference_pid, signal.SIGKILL)

        waiting.wait_until(lambda: pid_in(tmp_path, "inference") not in (None, inference_pid), 10,
                           "the inference child to come back")
        assert pid_in(tmp_path, "web") == web_pid and alive(web_pid)
        assert alive(pid_in(tmp_path, "inference"))
    assert "inference exited with status -9" in supervisor.out.getvalue()


def test_stopping_stops_every_child_returns_0_and_removes_their_pid_files(tmp_path):
    with supervising(tmp_path, Backoff(), web=["sleep", "600"], nginx=["sleep", "600"]) as (supervisor, result):
        waiting.wait_until(lambda: pid_in(tmp_path, "web") and pid_in(tmp_path, "nginx"), 10, "both to start")
        pids = [pid_in(tmp_path, "web"), pid_in(tmp_path, "nginx")]
    output = supervisor.out.getvalue()

    assert result == {"status": 0}
    assert not any(alive(pid) for pid in pids)
    assert list((tmp_path / "run").iterdir()) == []
    assert "web stopped" in output and "nginx stopped" in output


def restart_delays(output: str) -> list[str]:
    return re.findall(r"restarting in (\S+) s", output)


def test_a_child_crashing_in_a_row_waits_twice_as_long_each_time_up_to_the_cap(tmp_path):
    backoff = Backoff(first_s=0.05, cap_s=0.2, healthy_after_s=60)
    with supervising(tmp_path, backoff, broken=["false"]) as (supervisor, _):
        waiting.wait_until(lambda: len(restart_delays(supervisor.out.getvalue())) >= 5, 20, "five crashes")

    assert restart_delays(supervisor.out.getvalue())[:5] == ["0.05", "0.1", "0.2", "0.2", "0.2"]


def test_a_child_that_ran_healthily_before_it_crashed_waits_only_the_first_delay(tmp_path):
    backoff = Backoff(first_s=0.05, cap_s=0.2, healthy_after_s=0)  # every run counts as healthy
    with supervising(tmp_path, backoff, broken=["false"]) as (supervisor, _):
        waiting.wait_until(lambda: len(restart_delays(supervisor.out.getvalue())) >= 3, 20, "three crashes")

    assert set(restart_delays(supervisor.out.getvalue())) == {"0.05"}


def test_every_line_a_child_prints_carries_its_name(tmp_path):
    with supervising(tmp_path, Backoff(), web=["echo", "hello from web"]) as (supervisor, _):
        waiting.wait_until(lambda: "hello from web" in supervisor.out.getvalue(), 10, "the line")

    assert re.search(r"^\S+ web +\| hello from web$", supervisor.out.getvalue(), re.MULTILINE)


class FileAppears:
    """A prerequisite: a file exists. Counts how often the supervisor asked."""

    def __init__(self, path):
        self.path, self.asked = path, 0

    def __call__(self) -> bool:
        self.asked += 1
        return self.path.exists()


def test_a_child_with_a_prerequisite_starts_only_once_it_holds(tmp_path):
    ready = FileAppears(tmp_path / "web-listens")
    after = {"nginx": Prerequisite(ready, "web listens")}
    with supervising(tmp_path, Backoff(), after, web=["sleep", "600"],
                     nginx=["sleep", "600"]) as (supervisor, _):
        waiting.wait_until(lambda: pid_in(tmp_path, "web") and ready.asked >= 3, 10, "three checks")
        started_before = pid_in(tmp_path, "nginx")

        ready.path.touch()

        waiting.wait_until(lambda: pid_in(tmp_path, "nginx"), 10, "nginx to start")
    assert started_before is None
    assert "nginx starts once web listens" in supervisor.out.getvalue()


def test_a_prerequisite_that_never_holds_delays_the_start_at_most_its_limit(tmp_path):
    after = {"nginx": Prerequisite(lambda: False, "web listens", at_most_s=0.3)}
    with supervising(tmp_path, Backoff(), after, nginx=["sleep", "600"]) as (supervisor, _):
        waiting.wait_until(lambda: pid_in(tmp_path, "nginx"), 10, "nginx to start")

    told = "nginx has waited 0.3 s for this: web listens; starting it anyway"
    assert told in supervisor.out.getvalue()


def test_a_child_with_a_prerequisite_restarts_without_waiting_again(tmp_path):
    ready = FileAppears(tmp_path / "web-listens")
    ready.path.touch()
    after = {"nginx": Prerequisite(ready, "web listens")}
    backoff = Backoff(first_s=0.05, cap_s=0.2, healthy_after_s=60)
    with supervising(tmp_path, backoff, after, nginx=["sleep", "600"]):
        waiting.wait_until(lambda: pid_in(tmp_path, "nginx"), 10, "nginx to start")
        first = pid_in(tmp_path, "nginx")
        ready.path.unlink()

        os.kill(first, signal.SIGKILL)

        waiting.wait_until(lambda: pid_in(tmp_path, "nginx") not in (None, first), 10,
                           "nginx to come back")


@pytest.mark.process
def test_children_stop_when_the_supervisor_is_killed_outright(tmp_path):
    """kill -9 or the kernel's OOM killer leaves the supervisor no time to stop them: before,
    they ran on, holding the stack's ports, each in a process group of its own."""
    script = ("import pathlib, sys; from stack.supervisor import Supervisor; "
              "here = pathlib.Path(sys.argv[1]); "
              "supervisor = Supervisor(cwd=here, pid_dir=here / 'run'); "
              "supervisor.add('web', ['sleep', '600']); supervisor.run()")
    supervisor = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], cwd=REPO_DIR,
                                  stdout=subprocess.DEVNULL)
    try:
        waiting.wait_until(lambda: pid_in(tmp_path, "web"), 20, "the child to start")
        child = pid_in(tmp_path, "web")

        supervisor.kill()
        supervisor.wait()

        waiting.wait_until(lambda: not alive(child), 10, "the child to stop")
    finally:
        if (child := pid_in(tmp_path, "web")) and alive(child):
            os.kill(child, signal.SIGKILL)
