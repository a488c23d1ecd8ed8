"""A web process's presence without Redis: a file named for it, which it holds locked (flock) for
as long as it lives.

The kernel lets go of a process's locks when it ends, however it ends (a crash, SIGKILL), so a
file whose lock can be taken names a process that is gone, known at once and for certain. Every
process of the checkout sees the files: all the stacks of one checkout, which share its SQLite
file, and their reapers. A process whose file is not there (on another machine, in another
checkout, or forgotten) is not known to be gone: its answers are left to their heartbeat.
"""

import fcntl
import os
from pathlib import Path


class PresenceFile:
    """Held locked by this process from its creation until `release()` or the process's end."""

    def __init__(self, directory: Path, process_id: str):
        directory.mkdir(parents=True, exist_ok=True)
        self.process_id = process_id
        self.path = directory / process_id
        # Locked under a name no other process reads, then renamed (the lock stays with the
        # file): a sweep never meets it unlocked and takes it for a gone process's.
        unnamed = directory / f".{process_id}"
        self._fd = os.open(unnamed, os.O_CREAT | os.O_WRONLY, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.replace(unnamed, self.path)

    def close(self) -> None:
        """Lets go of the lock and leaves the file, as a process that dies does."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def release(self) -> None:
        """Removes the file, then lets go: a process that ends cleanly leaves nothing behind."""
        if self._fd >= 0:
            self.path.unlink(missing_ok=True)
            self.close()


def gone(directory: Path, process_ids: set[str]) -> set[str]:
    """Of these processes, the ones whose file is here, unlocked."""
    return {process for process in process_ids if _is_name(process) and _unlocked(directory / process)}


def forget_gone(directory: Path, keeping: set[str]) -> None:
    """Removes the files of gone processes but those in `keeping` (named by live answers, not
    yet ended): the files of crashed processes would otherwise gather for ever."""
    if not directory.is_dir():
        return
    for path in directory.iterdir():
        if _is_name(path.name) and path.name not in keeping:
            _unlocked(path, remove=True)


def _is_name(process_id: str) -> bool:
    """A process's id as web_process makes it; anything else (a row's value, a file being
    created under a dotted name) is no file of ours to read."""
    return process_id.isalnum()


def _unlocked(path: Path, remove: bool = False) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # its process holds it: alive
        return False
    else:
        if remove:  # while locked: no live process can hold this file again
            path.unlink(missing_ok=True)
        return True
    finally:
        os.close(fd)
