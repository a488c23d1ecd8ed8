"""What a step costs on this machine, learned from the steps already run.

A step costs a fixed part (reading every weight once, per-layer overhead) plus a part per token
fed (the arithmetic). Their ratio differs by orders of magnitude between machines: on a small
CPU a step of 20 tokens costs twice a step of one, on a GPU a step of 500 tokens costs little
more than a step of one. The scheduler sizes each step's prompt share from this fit instead of
from a constant that suits one machine only.

Steps of decode tokens only and steps with prompt tokens may run different ways (the compiled
decode step, the fused forward) with different fixed parts, so each kind has a fixed part of
its own and both share the part per token: one line through all steps would charge the
difference between the ways to the prompt tokens, and a line through one kind alone has too
little spread in its sizes where many streams decode (every step is about as large).

The fit is least squares through recent steps (older ones of each kind weigh less and less), so
it follows the machine as the batch and the cached lengths change.
"""

import enum
from dataclasses import dataclass

# Weight of the newest step of a kind in its running sums: about the last 50 of each count.
DECAY = 0.02
# Below this spread of step sizes (in tokens, within the kinds) the slope cannot be told from noise.
MIN_SPREAD_TOKENS = 4.0


class StepMix(enum.Enum):
    DECODE = "decode tokens only"
    PROMPT = "with prompt tokens"


@dataclass(frozen=True)
class StepFit:
    fixed: dict[StepMix, float]  # seconds; a kind not seen yet takes the other's
    per_token: float  # seconds

    def seconds(self, mix: StepMix, num_tokens: int) -> float:
        return self.fixed[mix] + self.per_token * num_tokens


class _Sums:
    """Decayed running sums of one kind's steps."""

    def __init__(self):
        self.weight = self.tokens = self.seconds = self.tokens_sq = self.tokens_seconds = 0.0

    def add(self, num_tokens: int, seconds: float, decay: float) -> None:
        keep = 1.0 - decay
        self.weight = keep * self.weight + 1.0
        self.tokens = keep * self.tokens + num_tokens
        self.seconds = keep * self.seconds + seconds
        self.tokens_sq = keep * self.tokens_sq + num_tokens * num_tokens
        self.tokens_seconds = keep * self.tokens_seconds + num_tokens * seconds

    def spread(self) -> float:
        """Weighted sum of squared distances of the sizes from their mean."""
        return 0.0 if self.weight == 0.0 else self.tokens_sq - self.tokens * self.tokens / self.weight

    def comovement(self) -> float:
        return 0.0 if self.weight == 0.0 else self.tokens_seconds - self.tokens * self.seconds / self.weight

    def fixed(self, per_token: float) -> float:
        return max(0.0, (self.seconds - per_token * self.tokens) / self.weight)


class StepCost:
    def __init__(self, decay: float = DECAY):
        self.decay = decay
        self.reset()

    def reset(self) -> None:
        """Forgets every step seen."""
        self._sums = {mix: _Sums() for mix in StepMix}
        self.seen = {mix: 0 for mix in StepMix}  # steps of each kind observed

    def observe(self, mix: StepMix, num_tokens: int, seconds: float) -> None:
        self._sums[mix].add(num_tokens, seconds, self.decay)
        self.seen[mix] += 1

    def fit(self) -> StepFit | None:
        """The fixed part of each kind and the shared part per token, or None until steps of
        different sizes were seen within a kind."""
        seen = [sums for sums in self._sums.values() if sums.weight > 0.0]
        weight = sum(sums.weight for sums in seen)
        spread = sum(sums.spread() for sums in seen)
        if weight == 0.0 or spread / weight < MIN_SPREAD_TOKENS * MIN_SPREAD_TOKENS:
            return None
        per_token = sum(sums.comovement() for sums in seen) / spread
        if per_token <= 0.0:
            return None  # noise, or a machine where more tokens cost nothing: no basis for a size
        fixed = {mix: sums.fixed(per_token) for mix, sums in self._sums.items() if sums.weight > 0.0}
        for mix in StepMix:
            fixed.setdefault(mix, next(iter(fixed.values())))
        return StepFit(fixed, per_token)

    def tokens_within(self, num_decoding: int, stretch: float) -> int | None:
        """Prompt tokens that can join `num_decoding` decode tokens while the step costs at most
        `stretch` times a step of those decode tokens alone, or, where a step with prompt tokens
        costs more than that however few it feeds, while that extra cost is at most 1/stretch
        of the stall the step adds (0 where not even one token would keep either).

        The second way is for a machine whose steps with prompt tokens run far slower than its
        decode steps whatever their size (a GPU: the fused forward launch by launch against a
        replayed graph; on the lent H100, 155 ms against 3.3 at 16 streams, most of the 155
        cuDNN's attention, since turned off): each cut of a prompt pays the difference again,
        so the cut that the stretch asks for (the fewest tokens a step) was the dearest."""
        fit = self.fit()
        if fit is None:
            return None
        decode = fit.seconds(StepMix.DECODE, num_decoding)
        prompt = fit.seconds(StepMix.PROMPT, num_decoding)
        allowed = max(stretch * decode - prompt, (stretch - 1.0) * (prompt - decode))
        return max(0, int(allowed / fit.per_token + 1e-6))  # a whole count must not round down by a hair
