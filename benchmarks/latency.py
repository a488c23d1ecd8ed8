"""Per-request timings and their summaries, shared by the HTTP load generator and the references.

Every system reports the same figures from the same kind of record, so the table compares like
with like: TTFT is request sent -> first token seen, ITL the gaps between one stream's
consecutive token arrivals, TPOT (E2E - TTFT) / (tokens - 1).
"""

from dataclasses import dataclass, field

from common.percentiles import percentile

PERCENTILES = (50, 90, 99)


@dataclass
class RequestRecord:
    index: int
    max_tokens: int
    num_prompt_tokens: int
    sent_at: float
    # When each piece of the answer arrived: one SSE content chunk, or one token for in-process
    # systems. The server skips chunks whose text is empty, so a gap may span two tokens.
    arrivals: list[float] = field(default_factory=list)
    finished_at: float | None = None
    completion_tokens: int = 0
    finish_reason: str | None = None
    error: str | None = None
    cancelled: bool = False
    # The answer's text, for a conversation's next turn and for comparing systems' answers.
    answer: str = ""
    # What the server's usage chunk said: its own count of the prompt (a check that it applied
    # the same chat template and vocabulary), and how much of the prompt it found cached.
    reported_prompt_tokens: int | None = None
    cached_tokens: int | None = None
    # Sent again because the server had closed the kept-alive connection (sse_client._send).
    reconnects: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None and not self.cancelled and self.finished_at is not None

    @property
    def ttft(self) -> float | None:
        return self.arrivals[0] - self.sent_at if self.arrivals else None

    @property
    def e2e(self) -> float | None:
        return None if self.finished_at is None else self.finished_at - self.sent_at

    @property
    def itls(self) -> list[float]:
        return [b - a for a, b in zip(self.arrivals, self.arrivals[1:])]

    @property
    def tpot(self) -> float | None:
        if self.ttft is None or self.e2e is None or self.completion_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.completion_tokens - 1)

    def brief(self) -> dict:
        return {
            "index": self.index, "prompt_tokens": self.num_prompt_tokens,
            "max_tokens": self.max_tokens, "completion_tokens": self.completion_tokens,
            "finish_reason": self.finish_reason, "ttft_s": _round(self.ttft),
            "e2e_s": _round(self.e2e), "tpot_s": _round(self.tpot), "error": self.error,
            "cached_tokens": self.cached_tokens,
        }


def spread(values: list[float]) -> dict[str, float | None]:
    return {f"p{q}": percentile(values, q) for q in PERCENTILES}


@dataclass
class LevelResult:
    """One system at one concurrency: throughput over the level's wall time and latency spreads."""

    system: str
    concurrency: int
    wall_s: float
    records: list[RequestRecord]
    # For systems that do not time per request (the static batch) or that know better than the
    # records (the static batch counts B tokens per step); otherwise taken from the records.
    token_override: int | None = None
    itl_override: list[float] | None = None
    extra: dict = field(default_factory=dict)

    @property
    def completed(self) -> list[RequestRecord]:
        return [r for r in self.records if r.ok]

    @property
    def output_tokens(self) -> int:
        if self.token_override is not None:
            return self.token_override
        return sum(r.completion_tokens for r in self.completed)

    @property
    def itls(self) -> list[float]:
        if self.itl_override is not None:
            return self.itl_override
        return [gap for r in self.completed for gap in r.itls]

    def summary(self) -> dict:
        completed = self.completed
        return {
            "system": self.system,
            "concurrency": self.concurrency,
            "requests": len(self.records),
            "completed": len(completed),
            "errors": sum(1 for r in self.records if r.error is not None),
            "reconnects": sum(r.reconnects for r in self.records),
            "wall_s": self.wall_s,
            "output_tokens": self.output_tokens,
            "prompt_tokens": sum(r.num_prompt_tokens for r in completed),
            "requests_per_s": len(completed) / self.wall_s if self.wall_s > 0 else None,
            "output_tokens_per_s": self.output_tokens / self.wall_s if self.wall_s > 0 else None,
            "ttft_s": spread([r.ttft for r in completed if r.ttft is not None]),
            "itl_s": spread(self.itls),
            "tpot_s": spread([r.tpot for r in completed if r.tpot is not None]),
            **self.extra,
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 5)
