"""Fault injection: a model runner that raises mid-stream, as a crashing kernel or OOM would."""

from tests.fakes.wrapped_runner import WrappedRunner


class InjectedFault(RuntimeError):
    pass


class FailingRunner(WrappedRunner):
    def __init__(self, runner, after_steps: int):
        super().__init__(runner)
        self.steps_left = after_steps

    def run(self, chunks, **options):
        if self.steps_left == 0:
            raise InjectedFault("injected fault in the forward pass")
        self.steps_left -= 1
        return self.runner.run(chunks, **options)
