"""How much CPU other processes took while a measurement ran, so a disturbed figure says so.

The machine is shared and has few cores: a test suite starting next door can halve a level's
throughput. The kernel's busy time for the whole machine, minus the time of the processes
measured (this one and the server), is the load nobody here asked for.
"""

import os
import time
from pathlib import Path

# Above this many cores' worth of foreign work on average, a level's figures are flagged.
DISTURBED_CORES = 0.25


def _machine_busy_ticks() -> int | None:
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return user + nice + system + irq + softirq + steal


def process_ticks(pid: int) -> int:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    # The command name may hold spaces and parentheses: the fields start after the last ')'.
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime of every thread


def family(pid: int) -> list[int]:
    """`pid` and its children (nginx's master and its workers), from /proc."""
    children = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            pass
    return [pid, *children]


class ForeignLoad:
    """`with ForeignLoad([server_pid]) as load: ...`; then `load.cores` is the foreign load."""

    def __init__(self, pids: list[int] | None = None):
        self.pids = [os.getpid(), *(pids or [])]
        self.cores: float | None = None

    def _ours(self) -> int:
        return sum(process_ticks(pid) for pid in self.pids)

    def __enter__(self) -> "ForeignLoad":
        self._started = time.monotonic()
        self._machine = _machine_busy_ticks()
        self._ours_at_start = self._ours()
        return self

    def __exit__(self, *exc) -> None:
        machine = _machine_busy_ticks()
        wall = time.monotonic() - self._started
        if machine is None or self._machine is None or wall <= 0:
            return
        foreign_ticks = (machine - self._machine) - (self._ours() - self._ours_at_start)
        self.cores = max(0.0, foreign_ticks / os.sysconf("SC_CLK_TCK") / wall)
