"""One object per running event loop: a daphne process has one loop, a test run makes many.

Objects that hold loop-bound state (an HTTP client's connections, a writer task) must not
outlive their loop; the ones of loops that have closed are dropped when a new loop asks.
"""

import asyncio
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def per_loop(make: Callable[[], T]) -> Callable[[], T]:
    """A function that returns the running loop's object, made by `make` the first time."""
    made: dict[asyncio.AbstractEventLoop, T] = {}

    def of_this_loop() -> T:
        loop = asyncio.get_running_loop()
        if loop not in made:
            for stale in [known for known in made if known.is_closed()]:
                del made[stale]
            made[loop] = make()
        return made[loop]

    return of_this_loop
