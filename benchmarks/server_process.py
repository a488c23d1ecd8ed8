"""Servers as child processes (the inference service, llama.cpp's server, daphne, a stand-in
upstream): started, awaited, watched for memory, stopped.

Peak memory is the kernel's own high-water mark (VmHWM), reset before each level through
/proc/PID/clear_refs, so each level reports its own peak rather than the peak so far; when the
reset is refused the figure is the peak since start, and says so.
"""

import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parent.parent


def _die_with_parent() -> None:
    """In the child before exec: a benchmark killed outright must not leave a server behind."""
    try:
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass  # not Linux: the `finally` in the caller is all there is


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ChildProcess:
    """A server in its own process: started, awaited until `ready_url` answers 200, watched for
    memory, stopped. Its output goes to a temporary file: a pipe nobody reads would stall it."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], ready_url: str,
                 setup=_die_with_parent, stop_timeout_s: float = 30.0):
        self.name, self.command, self.env, self.ready_url = name, command, env, ready_url
        self.setup, self.stop_timeout_s = setup, stop_timeout_s
        self.process: subprocess.Popen | None = None
        self.log = tempfile.NamedTemporaryFile(prefix=f"bench-{name}-", suffix=".log",
                                               delete=False)
        self.peak_is_per_level = True

    @property
    def pid(self) -> int:
        return self.process.pid

    # --- life ---
    def start(self, timeout_s: float = 60.0, poll_s: float = 0.2) -> httpx.Response:
        """Returns the first 200 answer of `ready_url`."""
        self.process = subprocess.Popen(
            self.command, cwd=REPO_ROOT, env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
            preexec_fn=self.setup if sys.platform == "linux" else None,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}:\n"
                                   f"{self.log_tail()}")
            try:
                response = httpx.get(self.ready_url, timeout=2.0)
                if response.status_code == 200:
                    return response
            except httpx.HTTPError:
                pass
            time.sleep(poll_s)
        self.stop()
        raise TimeoutError(f"{self.name} did not answer {self.ready_url} within {timeout_s:.0f}s:\n"
                           f"{self.log_tail()}")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGINT)  # uvicorn and daphne shut down cleanly on SIGINT
        try:
            self.process.wait(timeout=self.stop_timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def close(self) -> None:
        self.stop()
        self.log.close()
        Path(self.log.name).unlink(missing_ok=True)

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


class ServerProcess(ChildProcess):
    """The inference service."""

    def __init__(self, env: dict[str, str], port: int | None = None):
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        super().__init__(
            "inference-server",
            [sys.executable, "-m", "inference", "--host", "127.0.0.1", "--port", str(self.port)],
            {**os.environ, **env, "INFERENCE_PORT": str(self.port)}, f"{self.base_url}/health")
        self.model_name = ""

    def start(self, timeout_s: float = 600.0, poll_s: float = 0.5) -> httpx.Response:
        response = super().start(timeout_s, poll_s)  # healthy only once the model is loaded
        self.model_name = response.json()["model"]
        return response

    # --- metrics ---
    async def metrics(self, client: httpx.AsyncClient) -> dict[str, float]:
        """The unlabelled samples of /metrics, by name (labelled ones are summed per name)."""
        response = await client.get(f"{self.base_url}/metrics")
        return parse_metrics(response.text)


class LlamaServerProcess(ChildProcess):
    """llama.cpp's server on one GGUF file, with `slots` sequences decoding side by side.

    Each slot gets 2,048 tokens of context, the same longest prompt + answer as our server's
    default, and keeps its last prompt's cache for the next request that shares it (llama.cpp
    caches prompts unless a request says `cache_prompt: false`)."""

    CONTEXT_PER_SLOT = 2048

    def __init__(self, binary: Path, gguf: Path, slots: int, threads: int, alias: str,
                 port: int | None = None):
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.model_name = alias
        super().__init__(
            f"llama-server-{slots}",
            [str(binary), "--model", str(gguf), "--alias", alias,
             "--host", "127.0.0.1", "--port", str(self.port),
             "--parallel", str(slots), "--ctx-size", str(slots * self.CONTEXT_PER_SLOT),
             "--threads", str(threads), "--threads-batch", str(threads),
             "--metrics", "--no-webui"],
            dict(os.environ), f"{self.base_url}/health")

    def start(self, timeout_s: float = 120.0, poll_s: float = 0.2) -> httpx.Response:
        return super().start(timeout_s, poll_s)  # /health answers 503 until the model is loaded


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text: the unlabelled samples by name (labelled ones are summed per name)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_part, _, value = line.rpartition(" ")
        name = name_part.split("{", 1)[0]
        try:
            values[name] = values.get(name, 0.0) + float(value)
        except ValueError:
            continue
    return values
