"""Free loopback ports for the servers a test or a benchmark starts.

Every port comes from below the kernel's ephemeral range. A port from that range is free only
for now: the next outgoing connection (to PostgreSQL, Redis, a web process) may take it as its
local port and keep it, and the server given it can then never bind it (CI saw nginx fail so).
"""

import random
import socket
from pathlib import Path

_LOWEST = 10000
# Ports browsers refuse to connect to (net::ERR_UNSAFE_PORT), of those above _LOWEST: Chromium's
# list (net/base/port_util.cc) and Firefox's (network.security.ports.banned) both hold 10080.
_BROWSERS_REFUSE = frozenset({10080})
_handed_out: set[int] = set()


def free_port() -> int:
    return free_port_run(1)


def free_port_run(count: int) -> int:
    """The first of `count` consecutive free ports, none handed out before by this process.

    The stack gives its web processes consecutive ports.
    """
    low = _ephemeral_low()
    for first in random.sample(range(_LOWEST, low - count), 200):
        run = range(first, first + count)
        usable = _handed_out.isdisjoint(run) and _BROWSERS_REFUSE.isdisjoint(run)
        if usable and all(_bindable(port) for port in run):
            _handed_out.update(run)
            return first
    raise RuntimeError(f"no {count} consecutive free ports below {low}")


def _ephemeral_low() -> int:
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
