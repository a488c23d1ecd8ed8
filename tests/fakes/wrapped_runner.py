"""The model runner a fault-injecting fake wraps: everything but `run` is the real runner's."""


class WrappedRunner:
    def __init__(self, runner):
        self.runner = runner

    def __getattr__(self, name):
        # Only for what the fake does not define itself: the engine still asks the runner its
        # state (the compiled step's, for /health) between the faults.
        return getattr(self.runner, name)
