"""Free loopback ports for the servers a test or a benchmark starts."""

import random
import socket
from pathlib import Path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def free_port_run(count: int) -> int:
    """The first of `count` consecutive free ports, below the kernel's ephemeral range.

    The stack gives its web processes consecutive ports. A port from the ephemeral range is
    free only for now: the next outgoing connection (to PostgreSQL, Redis, a web process) may
    take the one after it as its local port and keep it, and a web process can never bind it.
    """
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for first in random.sample(range(10000, low - count), 200):
        if all(_bindable(port) for port in range(first, first + count)):
            return first
    raise RuntimeError(f"no {count} consecutive free ports below {low}")


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
