"""One process at a time builds what several may need at once (our kernels' library, the default
model converted from its GGUF file, llama.cpp's server): a second process that needs it waits for
the first and then finds it built. Before, each built it too: on a fresh machine `make test`'s
stacks and engines built our kernels five times at once, on two cores, and their model loads ran
past every test's deadline."""

import fcntl
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def held(lock: Path) -> Iterator[None]:
    """`lock` (a file, made with its folder where missing) held by this caller alone, across
    processes, until the block ends; the kernel lets go of a process that dies holding it."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("a") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        yield


def build_once(lock: Path, is_built: Callable[[], bool], build: Callable[[], None]) -> None:
    """`build()` unless `is_built()`; a caller that finds another building waits for it, then
    asks again."""
    if is_built():
        return
    with held(lock):
        if not is_built():
            build()
