"""Which way a decode step runs, the compiled graph or the fused forward: the one measured faster
on this machine's own steps of that kind.

What wins depends on the CPU, the precision and oneDNN's kernels, and on the step itself: the
graph computes every row from the group's first decoding one to its last, attention included,
and when it padded a lone stream's step to four rows its bf16 step at one stream on a 2-core AMD
EPYC was 25% shorter than the fused forward's with 100-160 tokens of context and 12-26% longer
with 2,000, where the padded rows' attention outweighed what the graph saved (BENCHMARKS.md,
"... a trial for each kind of step"; a lone stream is no longer padded). So under
INFERENCE_COMPILE=auto, once the graph compiled, every kind of step (`StepKind`: the rows
decoding, the rows the graph would compute, the context to a power of two) has a trial of its
own: the steps of that kind alternate between the two ways, each timed, until each way has
`samples`; the lower median serves that kind from then on. Alternate steps are fair pairs: the
same streams, one token longer.
"""

import statistics
from dataclasses import dataclass
from enum import StrEnum

from .kv_cache import BLOCK_TOKENS

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


@dataclass(frozen=True)
class StepKind:
    """What sets a decode step's cost apart for the two ways: the rows that decode (the rows
    either way computes) and the context, rounded up to a power of two of tokens."""

    rows: int
    context: int

    @classmethod
    def of(cls, decodes) -> "StepKind":
        """The kind of a step of these decodes (attention.GroupDecode: each group's count of
        rows and its longest row's keys)."""
        longest = max(decode.length for decode in decodes)
        return cls(sum(decode.count for decode in decodes), max(BLOCK_TOKENS, 1 << (longest - 1).bit_length()))


class StepTrials:
    """A trial for each kind of step, started when a step of that kind first comes."""

    def __init__(self, samples: int = SAMPLES):
        self.samples = samples
        self._trials: dict[StepKind, StepTrial] = {}

    def of(self, kind: StepKind) -> StepTrial:
        trial = self._trials.get(kind)
        if trial is None:
            trial = self._trials[kind] = StepTrial(self.samples)
        return trial

    def winners(self) -> dict[StepKind, StepPath]:
        """The kinds decided so far, and the way each goes."""
        return {kind: trial.winner for kind, trial in self._trials.items() if trial.winner is not None}
