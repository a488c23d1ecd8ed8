"""Fault injection: a model runner that raises whenever one marked request is in the step.

Stands in for a request that breaks the forward pass by itself (a kernel fault on its shape,
say), which no real request can be made to do on demand; every other step runs for real.
"""

from inference.async_engine import caller_id
from tests.fakes.failing_runner import InjectedFault
from tests.fakes.wrapped_runner import WrappedRunner


class PoisonedRunner(WrappedRunner):
    def __init__(self, runner, poisoned_request_id: str):
        super().__init__(runner)
        self.poisoned_request_id = poisoned_request_id
        self.num_refused_steps = 0

    def run(self, chunks, **options):
        if any(caller_id(chunk.sequence.request_id) == self.poisoned_request_id
               for chunk in chunks):
            self.num_refused_steps += 1
            raise InjectedFault(f"injected fault for {self.poisoned_request_id}")
        return self.runner.run(chunks, **options)
