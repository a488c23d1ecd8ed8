"""Which way a decode step runs, the compiled graph or the fused forward: the one measured faster
on this machine's own steps.

What wins depends on the CPU, the precision and oneDNN's kernels: on one 2-core AMD EPYC the
compiled step (decode_graph.py) made bf16 steps 10-30% shorter and float32 steps no shorter, or
longer, from one run to the next (BENCHMARKS.md, "The decode step compiled"). So under
INFERENCE_COMPILE=auto, once the graph compiled, the steps it could run alternate between the two
ways, each timed, until each way has `samples`; the lower median serves from then on. Alternate
steps are fair pairs: the same streams, one token longer.
"""

import statistics
from enum import StrEnum

# Steps timed each way: enough for a median that one slow step (a page fault, another process)
# does not move, few enough that the trial is over within a second or two of serving.
SAMPLES = 16


class StepPath(StrEnum):
    GRAPH = "graph"
    FUSED = "fused"


class StepTrial:
    def __init__(self, samples: int = SAMPLES):
        self.samples = samples
        self.seconds: dict[StepPath, list[float]] = {path: [] for path in StepPath}
        self.winner: StepPath | None = None

    def next_path(self) -> StepPath:
        """The way the next step the graph could run goes."""
        if self.winner is not None:
            return self.winner
        graph, fused = (len(self.seconds[path]) for path in StepPath)
        return StepPath.GRAPH if graph <= fused else StepPath.FUSED

    def record(self, path: StepPath, seconds: float) -> bool:
        """Counts one timed step; True on the call that decides the winner."""
        if self.winner is not None:
            return False
        self.seconds[path].append(seconds)
        if any(len(times) < self.samples for times in self.seconds.values()):
            return False
        medians = self.medians()
        self.winner = min(StepPath, key=lambda path: medians[path])  # a tie keeps the graph
        return True

    def medians(self) -> dict[StepPath, float]:
        return {path: statistics.median(times) for path, times in self.seconds.items() if times}
