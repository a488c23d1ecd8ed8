"""A server in a child process: started, awaited until it answers, watched for memory, stopped.

Its output goes to a file (`log_text`): a pipe nobody drains fills up and blocks the server in
the middle of writing a traceback. Peak memory is the kernel's own high-water mark (VmHWM),
reset through /proc/PID/clear_refs, so that each benchmark level reports its own peak rather
than the peak so far; when the reset is refused the figure is the peak since start, and says so.
"""

import ctypes
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2

REPO_DIR = Path(__file__).resolve().parent.parent
OK_ONLY = range(200, 201)
ANY_ANSWER = range(100, 500)  # up, whatever it thinks of the request


def die_with_parent() -> None:
    """In the child before exec: a run killed outright must not leave a server behind."""
    try:
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass  # not Linux: the caller's `finally` is all there is


class ChildProcess:
    """`command` with `env` over this process's environment, ready once `ready_url` answers with
    a status in `ready_statuses`. `whole_group`: it runs in a process group of its own, and
    stopping it signals the group (a server's workers with it)."""

    def __init__(self, name: str, command: list[str], env: dict[str, str] | None, ready_url: str, *,
                 ready_statuses: range = OK_ONLY, setup: Callable[[], None] | None = die_with_parent,
                 stop_signal: int = signal.SIGINT, whole_group: bool = False,
                 stop_timeout_s: float = 30.0):
        self.name, self.command, self.ready_url = name, command, ready_url
        self.env = {**os.environ, **(env or {})}
        self.ready_statuses, self.setup = ready_statuses, setup
        self.stop_signal, self.whole_group, self.stop_timeout_s = stop_signal, whole_group, stop_timeout_s
        self.process: subprocess.Popen | None = None
        self.log = tempfile.NamedTemporaryFile(prefix=f"{name}-", suffix=".log", delete=False)
        self.peak_is_per_level = True

    @property
    def pid(self) -> int:
        return self.process.pid

    def poll(self) -> int | None:
        return self.process.poll()

    # --- life ---
    def start(self, timeout_s: float = 60.0, poll_s: float = 0.2) -> httpx2.Response:
        """Returns the first ready answer of `ready_url`."""
        self.process = subprocess.Popen(
            self.command, cwd=REPO_DIR, env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
            preexec_fn=self.setup if sys.platform == "linux" else None,
            start_new_session=self.whole_group,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited early, with {self.process.returncode}:\n"
                                   f"{self.log_tail()}")
            try:
                response = httpx2.get(self.ready_url, timeout=2.0)
                if response.status_code in self.ready_statuses:
                    return response
            except httpx2.HTTPError:
                pass
            time.sleep(poll_s)
        self.stop()
        raise TimeoutError(f"{self.name} did not answer {self.ready_url} within {timeout_s:.0f}s:\n"
                           f"{self.log_tail()}")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self._signal(self.stop_signal)
        try:
            self.process.wait(timeout=self.stop_timeout_s)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def close(self) -> None:
        self.stop()
        self.log.close()
        Path(self.log.name).unlink(missing_ok=True)

    def _signal(self, signum: int) -> None:
        if self.whole_group:
            os.killpg(self.process.pid, signum)
        else:
            self.process.send_signal(signum)

    def log_text(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    # --- memory ---
    def reset_peak(self) -> None:
        try:
            Path(f"/proc/{self.pid}/clear_refs").write_text("5")
        except OSError:
            self.peak_is_per_level = False

    def peak_rss_bytes(self) -> int | None:
        return self._status_kib("VmHWM")

    def rss_bytes(self) -> int | None:
        return self._status_kib("VmRSS")

    def _status_kib(self, field: str) -> int | None:
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
        except (OSError, ValueError):
            pass
        return None


@contextmanager
def running(command: list[str], *, ready_url: str, env: dict[str, str] | None = None,
            timeout_s: float = 60, stop_signal: int = signal.SIGTERM) -> Iterator[ChildProcess]:
    """`command` in a process group of its own until the block ends, ready once `ready_url`
    answers at all (a test's server: stopped with its children, its log read by the test)."""
    child = ChildProcess(Path(command[0]).name, command, env, ready_url, ready_statuses=ANY_ANSWER,
                         setup=None, stop_signal=stop_signal, whole_group=True, stop_timeout_s=20)
    try:
        child.start(timeout_s, poll_s=0.05)
        yield child
    finally:
        child.close()
