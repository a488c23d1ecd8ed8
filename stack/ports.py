"""The loopback ports the stack's servers listen on: whether one is free before the stack starts,
and whether one is served while it starts."""

import socket

from common.env import HIGHEST_PORT

HOST = "127.0.0.1"


def listening(port: int) -> bool:
    """Whether something accepts connections on this port."""
    with socket.socket() as probe:
        return probe.connect_ex((HOST, port)) == 0


def free(port: int) -> bool:
    """Whether a server could listen on this port now. Bound as nginx and daphne bind theirs, with
    SO_REUSEADDR: a port whose last connections are still closing (TIME_WAIT, for a minute after
    the stack stopped) is free to them."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
        return True


def free_run_after(port: int, count: int, avoiding: set[int]) -> int | None:
    """The first of `count` consecutive free ports above `port`, none of them in `avoiding` (the
    stack's other ports); None when there is no such run."""
    for first in range(port + 1, HIGHEST_PORT - count + 2):
        run = range(first, first + count)
        if avoiding.isdisjoint(run) and all(free(candidate) for candidate in run):
            return first
    return None
