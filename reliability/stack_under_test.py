"""The whole stack (`python -m stack`: inference, daphne, Celery worker, nginx) in a database,
a Redis index and on ports of its own, as a suite's subject: started, found by role, stopped.

Everything is the real thing; the suite only chooses the environment it starts with.
"""

import os
import re
import tempfile
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import httpx2
import psutil

from benchmarks.relay_stack import fresh_database
from common.metrics import metric_values
from harness.child_process import ChildProcess
from harness.ports import free_port
from harness.waiting import healthy, wait_until
from stack import commands


class Role(str, Enum):
    INFERENCE = "inference"
    WEB = "web"
    WORKER = "worker"
    NGINX = "nginx"


# How each role's process shows itself in its command line (stack/commands.py).
_ROLE_PATTERNS = {
    Role.INFERENCE: re.compile(rf"-m {re.escape(commands.INFERENCE_MODULE)}\b"),
    Role.WEB: re.compile(rf"-m {re.escape(commands.DAPHNE_MODULE)}\b"),
    Role.WORKER: re.compile(r"-m celery\b"),
    Role.NGINX: re.compile(r"^nginx: master|\bnginx\b.* -c "),
}

# A fixed throwaway key: the suite's stack serves nobody but the suite.
_SECRET_KEY = "reliability-suite-only-not-a-secret-" + "x" * 20


@dataclass
class StackConfig:
    """What the suite chooses; `settings` are extra environment variables for every child."""

    database_server_url: str = ""  # empty: a SQLite file of the run's own
    redis_url: str = ""            # empty: in-memory channel layer, no worker
    settings: dict[str, str] = field(default_factory=dict)
    start_timeout_s: float = 300.0  # migrations plus loading the model on a busy machine


class StackUnderTest:
    """Use `with stack_under_test(config) as stack:`; then `stack.public_url`, `stack.pids()`."""

    def __init__(self, config: StackConfig, database_url: str, scratch: Path):
        self.config, self.database_url = config, database_url
        self.public_port, self.daphne_port, self.inference_port = free_port(), free_port(), free_port()
        self.public_url = f"http://127.0.0.1:{self.public_port}"
        self.inference_url = f"http://127.0.0.1:{self.inference_port}"
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "chatapp.settings",
            "DJANGO_SECRET_KEY": _SECRET_KEY,
            "DJANGO_DEBUG": "0",
            "DJANGO_LOG_LEVEL": "WARNING",
            "DJANGO_ADMIN_PASSWORD": "reliability-admin-password",
            "DATABASE_URL": database_url,
            "REDIS_URL": config.redis_url,
            "CHATAPP_PORT": str(self.public_port),
            "CHATAPP_DAPHNE_PORT": str(self.daphne_port),
            # One web process: killing "the" web process must cut the answer under test.
            "CHATAPP_WEB_PROCESSES": "1",
            "INFERENCE_PORT": str(self.inference_port),
            "INFERENCE_URL": self.inference_url,
            **config.settings,
        }
        self.process = ChildProcess("stack", commands.whole_stack(), self.env,
                                    f"{self.public_url}/healthz", stop_timeout_s=60.0)
        self._known_pids: set[int] = set()

    # --- life ---
    def start(self) -> None:
        self.process.start(timeout_s=self.config.start_timeout_s, poll_s=0.5)
        # nginx answers /healthz before the model is loaded: the suite needs both.
        wait_until(lambda: healthy(f"{self.inference_url}/health"),
                   self.config.start_timeout_s, "the inference service's /health")
        wait_until(lambda: set(Role) - self._expected_missing() <= set(self.pids()), 60,
                   "every role's process")
        self._known_pids = {p.pid for p in self._descendants()}

    def stop(self) -> list[int]:
        """Stops the stack as Ctrl-C would; returns the pids that outlived it (then killed)."""
        self._known_pids |= {p.pid for p in self._descendants()}
        self.process.stop()
        survivors = [p for p in (_process(pid) for pid in self._known_pids) if p is not None]
        for leftover in survivors:
            leftover.kill()
        return [p.pid for p in survivors]

    # --- processes ---
    def pids(self) -> dict[Role, int]:
        """The top process of each role; its descendants (nginx's workers, Celery's pool) count
        as part of it."""
        found: dict[Role, int] = {}
        for child in self._descendants():
            try:
                command = " ".join(child.cmdline())
            except psutil.Error:
                continue
            for role, pattern in _ROLE_PATTERNS.items():
                if role not in found and pattern.search(command):
                    found[role] = child.pid
        return found

    def all_pids(self) -> list[int]:
        """Every process of the stack: the supervisor and all it started."""
        return [self.process.pid, *(p.pid for p in self._descendants())]

    def _descendants(self) -> list[psutil.Process]:
        try:
            # Parents come before their children in psutil's recursive walk.
            return psutil.Process(self.process.pid).children(recursive=True)
        except psutil.Error:
            return []

    def _expected_missing(self) -> set[Role]:
        return set() if self.config.redis_url else {Role.WORKER}

    # --- probes ---
    def engine_metrics(self) -> dict[str, float]:
        """The inference service's /metrics, unlabelled sample values by name."""
        return metric_values(httpx2.get(f"{self.inference_url}/metrics", timeout=10).text)

    def log_tail(self, lines: int = 60) -> str:
        return self.process.log_tail(lines)


def _process(pid: int) -> psutil.Process | None:
    try:
        process = psutil.Process(pid)
        return process if process.is_running() and process.status() != psutil.STATUS_ZOMBIE else None
    except psutil.Error:
        return None


@contextmanager
def stack_under_test(config: StackConfig):
    """A started stack in a fresh database (created, then dropped after the stack stopped)."""
    with ExitStack() as cleanup:
        scratch = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="reliability-")))
        database_url = cleanup.enter_context(
            fresh_database(config.database_server_url or None, scratch, prefix="reliability"))
        stack = StackUnderTest(config, database_url, scratch)
        cleanup.callback(stack.process.close)
        try:
            stack.start()
        except BaseException:
            stack.stop()
            raise
        cleanup.callback(stack.stop)
        yield stack
