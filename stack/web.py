"""How many daphne processes `make run` starts, and the port each listens on.

Several processes share the work only when they share a channel layer (Redis): a Stop sent to
one must reach the stream another holds. Without Redis, on SQLite (whose writers queue for the
file's lock within one process only: chatapp/runtime/sqlite_queue), or without nginx to spread requests
over them, one process serves, whatever was asked.
"""

import os
from dataclasses import dataclass

from common.env import HIGHEST_PORT, BadVariable
from stack.ports import listening


@dataclass(frozen=True)
class WebProcesses:
    ports: tuple[int, ...]
    why_one: str = ""  # why a single process serves although more were asked; empty otherwise

    def names(self) -> list[str]:
        """The supervisor's names: "web" alone, else "web-1", "web-2", …"""
        if len(self.ports) == 1:
            return ["web"]
        return [f"web-{number}" for number in range(1, len(self.ports) + 1)]

    def all_listening(self) -> bool:
        return all(listening(port) for port in self.ports)


def default_count() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0))


def plan(asked: int, *, first_port: int, with_redis: bool, on_sqlite: bool, with_nginx: bool) -> WebProcesses:
    """`asked` processes on consecutive ports from `first_port`, when they can share the work."""
    why_not = _why_not_several(with_redis=with_redis, on_sqlite=on_sqlite, with_nginx=with_nginx)
    if asked > 1 and why_not:
        return WebProcesses((first_port,), f"{asked} web processes asked, starting one: {why_not}")
    if first_port + asked - 1 > HIGHEST_PORT:
        raise BadVariable(f"CHATAPP_DAPHNE_PORT={first_port}: {asked} web processes would take ports up to "
                          f"{first_port + asked - 1}, past {HIGHEST_PORT} "
                          f"(CHATAPP_DAPHNE_PORT={HIGHEST_PORT - asked + 1} would do)")
    return WebProcesses(tuple(range(first_port, first_port + asked)))


def _why_not_several(*, with_redis: bool, on_sqlite: bool, with_nginx: bool) -> str:
    if not with_redis:
        return ("without REDIS_URL they share no channel layer, so a Stop would miss a stream held "
                "by another process")
    if on_sqlite:
        return ("on SQLite their writes would contend for the file's lock (set DATABASE_URL to "
                "PostgreSQL)")
    if not with_nginx:
        return "without nginx nothing spreads requests over them"
    return ""
