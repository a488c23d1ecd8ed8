"""llama.cpp's server as the chat app's upstream in tests, built once as the engine benchmark
builds it (benchmarks/llama_cpp.py keeps the binary under ~/.cache/chatapp/llama.cpp/).

The tests' build (Build.TESTS: only ggml optimised) takes 5-8 minutes of both cores. So that a
fresh machine's `make test` does not spend them idle at the end, the build starts in the
background as soon as pytest knows a selected test needs it (`pytest_collection_finish` in
tests/conftest.py), at the lowest CPU priority so that it takes what the other tests leave, and
those tests run last; `.ci/run` starts it before the installs. A test that gets there first
waits for it: the build holds a lock that `LlamaCpp.build` takes too.
"""

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.llama_cpp import Build, LlamaCpp
from benchmarks.server_process import LlamaServerProcess

MARK = "llama_cpp"

_background: subprocess.Popen | None = None


def needed_by(items: list[pytest.Item]) -> bool:
    return any(item.get_closest_marker(MARK) for item in items)


def start_background_build() -> None:
    """Builds llama-server in a child process of the lowest priority, unless it is built."""
    global _background
    if _background is None:
        _background = LlamaCpp(build=Build.TESTS).build_in_background()


def stop_background_build() -> None:
    """At the session's end a build still running is stopped; the next one resumes it."""
    if _background is not None and _background.poll() is None:
        os.killpg(_background.pid, signal.SIGTERM)
        _background.wait()


@contextlib.contextmanager
def llama_server(model_file: Path, model_name: str, slots: int = 2) -> Iterator[LlamaServerProcess]:
    """llama-server on `model_file`, answering to `model_name`, started once the build is done."""
    binary = LlamaCpp(build=Build.TESTS).build()
    server = LlamaServerProcess(binary, model_file, slots=slots, threads=1, alias=model_name)
    try:
        server.start()
        yield server
    finally:
        server.close()
