"""A Redis server of the suite's own on a free port, so that a suite may stop and restart it
without touching the machine's shared one."""

import shutil
import subprocess
import tempfile

import redis

from harness.ports import free_port
from harness.waiting import wait_until


class RedisServer:
    def __init__(self):
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._folder = tempfile.TemporaryDirectory(prefix="reliability-redis-")
        self._process: subprocess.Popen | None = None

    def start(self) -> None:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        self._process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self._folder.name],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(self.answers, 30, f"redis-server on port {self.port}")

    @property
    def pid(self) -> int:
        return self._process.pid

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            self._process.wait(timeout=30)

    def answers(self) -> bool:
        try:
            return redis.Redis.from_url(self.url, socket_timeout=1).ping()
        except redis.RedisError:
            return False

    def __enter__(self) -> "RedisServer":
        self.start()
        return self

    def __exit__(self, *_) -> None:
        self.stop()
        self._folder.cleanup()
