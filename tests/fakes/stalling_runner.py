"""Fault injection: a model runner that holds every step until the test releases it.

Stands in for a stuck or very slow accelerator, which a real model cannot be made into on
demand. The real runner still does the work once released.
"""

import threading

from tests.fakes.wrapped_runner import WrappedRunner


class StallingRunner(WrappedRunner):
    def __init__(self, runner):
        super().__init__(runner)
        self.entered = threading.Event()
        self.released = threading.Event()

    def run(self, chunks, **options):
        self.entered.set()
        self.released.wait()
        return self.runner.run(chunks, **options)
