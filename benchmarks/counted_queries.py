"""The database queries a web process makes, counted by the function of ours that made them.

    python -m benchmarks.counted_queries FILE <daphne's arguments>

runs the web process as stack.daphne_uvloop does, with every database connection counting its
statements under the innermost function of chatapp (outside its runtime room) on the stack, or
`elsewhere` (Django's own session and user reads): the counts are written to FILE, as JSON,
within 50 ms of changing. `QueryCounts` reads them from the benchmark's side, with the time it
did, so that the queries of a window can be told apart (the watch benchmark: how many queries
watchers cost while the live channel delivers).
"""

import asyncio
import collections
import json
import os
import sys
import threading
import time
from pathlib import Path

from django.db.backends.signals import connection_created

from stack import daphne_uvloop

WRITE_EVERY_S = 0.05
_counts: collections.Counter = collections.Counter()


def _maker() -> str:
    frame = sys._getframe(2)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith("chatapp.") and not module.startswith("chatapp.runtime."):
            return f"{module}.{frame.f_code.co_name}"
        frame = frame.f_back
    return "elsewhere"


def _counting(execute, sql, params, many, context):
    _counts[_maker()] += 1
    return execute(sql, params, many, context)


def _count_on(sender, connection, **kwargs) -> None:
    """First in the list: Django's `execute_wrapper()` blocks, open as a connection is made, pop
    the last one."""
    if _counting not in connection.execute_wrappers:
        connection.execute_wrappers.insert(0, _counting)


def _write_counts(path: Path) -> None:
    written = None
    while True:
        counts = dict(_counts)
        if counts != written:
            path.with_suffix(".tmp").write_text(json.dumps(counts))
            os.replace(path.with_suffix(".tmp"), path)
            written = counts
        time.sleep(WRITE_EVERY_S)


class QueryCounts:
    """The counts a web process wrote, read every `every_s` by a task of the benchmark's loop."""

    def __init__(self, path: Path, every_s: float = 0.1):
        self.path, self.every_s = path, every_s
        self.samples: list[tuple[float, dict[str, int]]] = []  # (perf_counter, counts)
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._sample())

    def stop(self) -> None:
        self._task.cancel()

    def between(self, start: float, end: float) -> tuple[float, dict[str, int]]:
        """(seconds, queries by maker) from the first sample at or after `start` to the last at
        or before `end`."""
        inside = [(at, counts) for at, counts in self.samples if start <= at <= end]
        if len(inside) < 2:
            return 0.0, {}
        (first_at, first), (last_at, last) = inside[0], inside[-1]
        made = {maker: n - first.get(maker, 0) for maker, n in last.items() if n > first.get(maker, 0)}
        return last_at - first_at, made

    async def _sample(self) -> None:
        while True:
            try:
                counts = json.loads(self.path.read_text())
            except (FileNotFoundError, json.JSONDecodeError):
                counts = {}
            self.samples.append((time.perf_counter(), counts))
            await asyncio.sleep(self.every_s)


def main() -> None:
    path, sys.argv = Path(sys.argv[1]), [sys.argv[0], *sys.argv[2:]]
    connection_created.connect(_count_on)
    threading.Thread(target=_write_counts, args=(path,), daemon=True, name="query-counts").start()
    daphne_uvloop.main()


if __name__ == "__main__":
    main()
