"""One request's life inside the engine: its tokens, its place in the cache, its state."""

import time
from dataclasses import dataclass
from enum import Enum, auto

import torch

from common.vocabulary import FinishReason

from .detokenizer import IncrementalDetokenizer
from .kv_cache import CacheSlot


class SequenceStatus(Enum):
    WAITING = auto()
    RUNNING = auto()
    FINISHED = auto()


# Temperatures below this are greedy: a logit divided by 1e-40 overflows float32 (the draw would
# fail the request), and long before that the likeliest token takes every draw (vLLM's epsilon).
GREEDY_BELOW = 1e-5


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int
    temperature: float = 0.0  # 0 (or below GREEDY_BELOW) means greedy
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW


class Sequence:
    def __init__(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                 detokenizer: IncrementalDetokenizer):
        if not prompt_token_ids:
            raise ValueError("a prompt needs at least one token")
        self.request_id = request_id
        self.prompt_token_ids = list(prompt_token_ids)
        self.output_token_ids: list[int] = []
        self.params = params
        self.detokenizer = detokenizer
        self.status = SequenceStatus.WAITING
        self.finish_reason: FinishReason | None = None
        self.slot: CacheSlot | None = None
        # Tokens whose keys and values are in the cache; the first num_reused_tokens of them
        # came from another row (a shared prefix) instead of being fed.
        self.num_cached_tokens = 0
        self.num_reused_tokens = 0
        self.arrived_at = time.monotonic()
        self.admitted_at: float | None = None
        # The scheduler's count of prompt tokens fed (to every sequence) when this one arrived:
        # how long its prompt waited, counted in others' tokens fed since (scheduler.py).
        self.prompt_tokens_fed_before = 0
        self.generator: torch.Generator | None = None
        if not params.greedy:
            self.generator = torch.Generator()
            if params.seed is None:
                self.generator.seed()
            else:
                self.generator.manual_seed(params.seed)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def num_tokens(self) -> int:
        return self.num_prompt_tokens + self.num_output_tokens

    @property
    def num_reserved_tokens(self) -> int:
        """The most this sequence can ever hold in the cache."""
        return self.num_prompt_tokens + self.params.max_tokens

    @property
    def num_prompt_tokens_left(self) -> int:
        """Prompt tokens not fed yet."""
        return self.num_prompt_tokens - self.num_cached_tokens

    @property
    def is_prefilling(self) -> bool:
        return self.num_cached_tokens < self.num_prompt_tokens

    @property
    def cached_token_ids(self) -> list[int]:
        """The tokens whose keys and values this sequence's cache row holds, in order."""
        cached = self.prompt_token_ids[: self.num_cached_tokens]
        return cached + self.output_token_ids[: self.num_cached_tokens - len(cached)]

    @property
    def last_token_id(self) -> int:
        return self.output_token_ids[-1] if self.output_token_ids else self.prompt_token_ids[-1]

    def finish(self, reason: FinishReason) -> None:
        self.status = SequenceStatus.FINISHED
        self.finish_reason = reason

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED
