"""Waiting on a condition with a deadline, never a fixed sleep; and the probes waited on."""

import time
from collections.abc import Callable

import httpx2

from stack.readiness import healthy  # noqa: F401  (the tests' probe is `make run`'s)


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Polls `condition` until it holds; fails loudly with `what` when the deadline passes."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


def answers(url: str) -> bool:
    """`url` answers at all, with anything but a server error."""
    try:
        return httpx2.get(url, timeout=2).status_code < 500
    except httpx2.TransportError:
        return False
