"""Keeps the local stack's processes running: a child that dies is started again, the rest serve on.

Neither honcho (it stops every process when one ends) nor supervisord (it gives up after a fixed
number of tries, waits linearly, and logs to files instead of our terminal) does this; README.md,
"Dependencies", says more. A restart waits `Backoff.delay_s`: doubling from the first crash,
capped, and back to the first delay once the child had run healthily for a while.
"""

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TextIO

# How long children get to exit after SIGTERM before they are killed.
STOP_TIMEOUT_S = 10.0
# The supervisor checks for a stop request at least this often (a signal handler only sets a flag).
_TICK_S = 0.2
# The name the supervisor's own lines carry ("web started (pid=…)").
_OWN_NAME = "system"
# In front of each child's command on Linux: the kernel sends the child SIGTERM when the
# supervisor dies, even killed outright (kill -9, the OOM killer), which leaves it no time to stop
# them (PR_SET_PDEATHSIG, kept across the exec). A small Python that then becomes the command,
# not Popen's `preexec_fn`, which may deadlock in a process with threads. A supervisor already
# gone before the request was made is not noticed by it: hence the parent's pid, compared after.
_DIES_WITH_PARENT = ("import ctypes, os, signal, sys; "
                     # 1: PR_SET_PDEATHSIG
                     "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM); "
                     "os.getppid() == int(sys.argv[1]) or sys.exit(1); "
                     "os.execvp(sys.argv[2], sys.argv[2:])")


@dataclass(frozen=True)
class Backoff:
    first_s: float = 1.0
    cap_s: float = 30.0
    healthy_after_s: float = 30.0  # a child that ran this long is forgiven its earlier crashes

    def delay_s(self, crashes_in_a_row: int) -> float:
        return min(self.cap_s, self.first_s * 2 ** max(crashes_in_a_row - 1, 0))


@dataclass(frozen=True)
class Prerequisite:
    """What a child waits for before its first start, and for how long at most.

    nginx waits for its web processes to listen: a request it passed on to one still starting
    would find nothing, and nginx would then count that process failed for 10 s after it came
    up. Bounded, so that one that never listens (crashing at start) cannot keep nginx, and the
    page saying the app is unreachable, from starting at all. A restart does not wait.
    """

    holds: Callable[[], bool]
    description: str  # what holds once it is met: "web-1, web-2 listen"
    at_most_s: float = 60.0


class ChildState(Enum):
    PENDING = "pending"  # not started yet: its prerequisite does not hold
    RUNNING = "running"
    WAITING = "waiting"  # crashed; starts again at `restart_at`
    STOPPED = "stopped"


@dataclass
class Child:
    name: str
    command: list[str]
    after: Prerequisite | None = None
    state: ChildState = ChildState.STOPPED
    process: subprocess.Popen | None = None
    started_at: float = 0.0
    restart_at: float = 0.0
    crashes_in_a_row: int = 0


@dataclass
class Supervisor:
    """Runs named commands, each in its own process group, until `stop()` (thread- and signal-safe)."""

    cwd: Path
    pid_dir: Path  # <name>.pid for each running child, for operators and tests
    backoff: Backoff = Backoff()
    out: TextIO = sys.stdout
    _children: dict[str, Child] = field(default_factory=dict)
    _exits: queue.Queue = field(default_factory=queue.Queue)
    _print_lock: threading.Lock = field(default_factory=threading.Lock)
    _stop_requested: bool = False

    def add(self, name: str, command: list[str], after: Prerequisite | None = None) -> None:
        self._children[name] = Child(name, command, after)

    def stop(self) -> None:
        self._stop_requested = True

    def run(self) -> int:
        """Starts every child and keeps them running until `stop()`; then stops them all. Returns 0."""
        self.pid_dir.mkdir(parents=True, exist_ok=True)
        began = time.monotonic()
        try:
            for child in self._children.values():
                if child.after is None:
                    self._start(child)
                else:
                    child.state = ChildState.PENDING
                    self._say(_OWN_NAME, f"{child.name} starts once {child.after.description}")
            while not self._stop_requested:
                self._handle_exits(timeout_s=min(_TICK_S, self._until_next_restart_s()))
                now = time.monotonic()
                for child in self._children.values():
                    if child.state is ChildState.WAITING and child.restart_at <= now:
                        self._start(child)
                    elif child.state is ChildState.PENDING:
                        self._start_when_due(child, waited_s=now - began)
        finally:  # also when a command cannot start at all: leave no child behind
            self._stop_all()
        return 0

    def _start(self, child: Child) -> None:
        # A group of its own, so that stopping a child also stops what it started (nginx's
        # workers), and the terminal's Ctrl-C reaches only us: we stop the children in order.
        process = subprocess.Popen(_dying_with_us(child.command), cwd=self.cwd,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   process_group=0,
                                   env={**os.environ, "PYTHONUNBUFFERED": "1"})  # lines as they come
        child.process, child.state, child.started_at = process, ChildState.RUNNING, time.monotonic()
        self._pid_file(child).write_text(f"{process.pid}\n")
        self._say(_OWN_NAME, f"{child.name} started (pid={process.pid})")
        threading.Thread(target=self._relay_output, args=(child.name, process), daemon=True,
                         name=f"{child.name}-output").start()
        threading.Thread(target=self._await_exit, args=(child, process), daemon=True,
                         name=f"{child.name}-wait").start()

    def _start_when_due(self, child: Child, waited_s: float) -> None:
        if child.after.holds():
            self._start(child)
        elif waited_s >= child.after.at_most_s:
            self._say(_OWN_NAME, f"{child.name} has waited {child.after.at_most_s:g} s for this: "
                                  f"{child.after.description}; starting it anyway")
            self._start(child)

    def _await_exit(self, child: Child, process: subprocess.Popen) -> None:
        self._exits.put((child, process, process.wait()))

    def _handle_exits(self, timeout_s: float) -> None:
        try:
            child, process, status = self._exits.get(timeout=max(timeout_s, 0.0))
        except queue.Empty:
            return
        if process is not child.process or self._stop_requested:
            return
        _kill_group(process.pid)  # what it left behind would hold its port
        ran_s = time.monotonic() - child.started_at
        child.crashes_in_a_row = 1 if ran_s >= self.backoff.healthy_after_s else child.crashes_in_a_row + 1
        delay_s = self.backoff.delay_s(child.crashes_in_a_row)
        child.state, child.restart_at = ChildState.WAITING, time.monotonic() + delay_s
        self._pid_file(child).unlink(missing_ok=True)
        self._say(_OWN_NAME, f"{child.name} exited with status {status} after {ran_s:.1f} s; "
                              f"restarting in {delay_s:g} s")

    def _until_next_restart_s(self) -> float:
        waiting = [c.restart_at for c in self._children.values() if c.state is ChildState.WAITING]
        return min(waiting, default=float("inf")) - time.monotonic()

    def _stop_all(self) -> None:
        running = [c for c in self._children.values() if c.state is ChildState.RUNNING]
        for child in running:
            _signal_group(child.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for child in running:
            try:
                child.process.wait(timeout=max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                self._say(_OWN_NAME, f"{child.name} did not stop within {STOP_TIMEOUT_S:g} s; killing it")
            _kill_group(child.process.pid)
            child.process.wait()
            child.state = ChildState.STOPPED
            self._pid_file(child).unlink(missing_ok=True)
            self._say(_OWN_NAME, f"{child.name} stopped")
        for child in self._children.values():
            child.state = ChildState.STOPPED

    def _relay_output(self, name: str, process: subprocess.Popen) -> None:
        for line in process.stdout:
            self._say(name, line.decode(errors="replace").rstrip("\n"))

    def announce(self, text: str) -> None:
        """A line of the stack's own, as it is, between the children's lines (thread-safe)."""
        with self._print_lock:
            self.out.write(f"{text}\n")
            self.out.flush()

    def _say(self, name: str, text: str) -> None:
        width = max(len(n) for n in [*self._children, _OWN_NAME])
        with self._print_lock:
            self.out.write(f"{time.strftime('%H:%M:%S')} {name:<{width}} | {text}\n")
            self.out.flush()

    def _pid_file(self, child: Child) -> Path:
        return self.pid_dir / f"{child.name}.pid"


def _dying_with_us(command: list[str]) -> list[str]:
    if not sys.platform.startswith("linux"):
        return command
    return [sys.executable, "-c", _DIES_WITH_PARENT, str(os.getpid()), *command]


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:  # the whole group is gone already
        pass


def _kill_group(pgid: int) -> None:
    _signal_group(pgid, signal.SIGKILL)
