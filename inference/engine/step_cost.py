"""What a step costs on this machine, learned from the steps already run.

A step costs a fixed part (reading every weight once, per-layer overhead) plus a part per token
fed (the arithmetic). Their ratio differs by orders of magnitude between machines: on a small
CPU a step of 20 tokens costs twice a step of one, on a GPU a step of 500 tokens costs little
more than a step of one. The scheduler sizes each step's prompt share from this fit instead of
from a constant that suits one machine only.

The fit is a least-squares line through recent steps (older ones weigh less and less), so it
follows the machine as the batch and the cached lengths change.
"""

# Weight of the newest step in the running sums: about the last 50 steps count.
DECAY = 0.02
# Below this spread of step sizes (in tokens) the slope cannot be told from noise.
MIN_SPREAD_TOKENS = 4.0


class StepCost:
    def __init__(self, decay: float = DECAY):
        self.decay = decay
        self.reset()

    def reset(self) -> None:
        """Forgets every step seen."""
        self._weight = self._tokens = self._seconds = self._tokens_sq = self._tokens_seconds = 0.0

    def observe(self, num_tokens: int, seconds: float) -> None:
        keep = 1.0 - self.decay
        self._weight = keep * self._weight + 1.0
        self._tokens = keep * self._tokens + num_tokens
        self._seconds = keep * self._seconds + seconds
        self._tokens_sq = keep * self._tokens_sq + num_tokens * num_tokens
        self._tokens_seconds = keep * self._tokens_seconds + num_tokens * seconds

    def fit(self) -> tuple[float, float] | None:
        """(fixed seconds, seconds per token), or None until steps of different sizes were seen."""
        if self._weight == 0.0:
            return None
        mean_tokens = self._tokens / self._weight
        mean_seconds = self._seconds / self._weight
        variance = self._tokens_sq / self._weight - mean_tokens * mean_tokens
        if variance < MIN_SPREAD_TOKENS * MIN_SPREAD_TOKENS:
            return None
        per_token = (self._tokens_seconds / self._weight - mean_tokens * mean_seconds) / variance
        if per_token <= 0.0:
            return None  # noise, or a machine where more tokens cost nothing: no basis for a size
        return max(0.0, mean_seconds - per_token * mean_tokens), per_token

    def tokens_within(self, num_tokens: int, stretch: float) -> int | None:
        """Tokens that can join a step of `num_tokens` while it costs at most `stretch` times as much."""
        fit = self.fit()
        if fit is None:
            return None
        fixed, per_token = fit
        return int((stretch - 1.0) * (fixed + per_token * num_tokens) / per_token)
