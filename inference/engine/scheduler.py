"""Decides, before each step, which sequences run and which prompt tokens they feed.

Every decoding sequence advances by one token per step. Prompts are fed in chunks from a
per-step token budget, so a long new prompt shares steps with the running streams instead of
freezing them. Waiting requests join between steps whenever the cache has room; finished or
aborted ones leave at once and give their cache rows back.
"""

import time
from collections import deque
from dataclasses import dataclass

from .kv_cache import KVCache
from .sequence import Sequence, SequenceStatus


@dataclass(frozen=True)
class ScheduledChunk:
    sequence: Sequence
    start: int  # position of the first token fed
    token_ids: list[int]

    @property
    def end(self) -> int:
        return self.start + len(self.token_ids)

    @property
    def samples(self) -> bool:
        """True when this chunk reaches the sequence's newest token, so the step yields the next."""
        return self.end == self.sequence.num_tokens


class Scheduler:
    def __init__(self, kv_cache: KVCache, max_running: int, prefill_chunk: int,
                 prefill_chunk_idle: int, prefill_chunk_min: int = 16):
        self.kv_cache = kv_cache
        self.max_running = max_running
        self.prefill_chunk = prefill_chunk
        self.prefill_chunk_idle = prefill_chunk_idle
        self.prefill_chunk_min = min(prefill_chunk_min, prefill_chunk)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, sequence: Sequence) -> None:
        self.waiting.append(sequence)

    def schedule(self) -> list[ScheduledChunk]:
        self._admit()
        # In cache order, so that each group's decode tokens sit side by side in the step.
        decoding = sorted((s for s in self.running if not s.is_prefilling),
                          key=lambda s: (s.slot.group, s.slot.row))
        chunks = [ScheduledChunk(s, s.num_tokens - 1, [s.last_token_id]) for s in decoding]
        if decoding:
            # A step's cost is a fixed part plus a part per token: feeding about one prompt
            # token per stream, plus a fixed allowance, keeps a step with a prompt chunk within
            # about twice a plain decode step. Streams still in their prompt count too: when
            # prompts queue up fewer streams decode, and a budget that shrank with them would
            # feed the queued prompts slower still.
            budget = min(self.prefill_chunk, self.prefill_chunk_min + len(self.running))
        else:
            budget = self.prefill_chunk_idle
        for sequence in self.running:
            if budget == 0:
                break
            if sequence.is_prefilling:
                start = sequence.num_cached_tokens
                tokens = sequence.prompt_token_ids[start:start + budget]
                chunks.append(ScheduledChunk(sequence, start, tokens))
                budget -= len(tokens)
        return chunks

    def finish(self, sequence: Sequence) -> None:
        """Takes a finished sequence out of the batch and frees its cache rows."""
        self.running.remove(sequence)
        self._release(sequence)

    def abort(self, request_id: str) -> Sequence | None:
        for queue in (self.waiting, self.running):
            for sequence in queue:
                if sequence.request_id == request_id:
                    queue.remove(sequence)
                    self._release(sequence)
                    return sequence
        return None

    def abort_all(self) -> list[Sequence]:
        aborted = [*self.running, *self.waiting]
        for sequence in aborted:
            self._release(sequence)
        self.running.clear()
        self.waiting.clear()
        return aborted

    def _admit(self) -> None:
        while self.waiting and len(self.running) < self.max_running:
            sequence = self.waiting[0]
            if not self.kv_cache.can_allocate(sequence.num_reserved_tokens):
                break
            self.waiting.popleft()
            sequence.slot = self.kv_cache.allocate(sequence.num_reserved_tokens)
            sequence.status = SequenceStatus.RUNNING
            sequence.admitted_at = time.monotonic()
            self.running.append(sequence)

    def _release(self, sequence: Sequence) -> None:
        if sequence.slot is not None:
            self.kv_cache.free(sequence.slot)
            sequence.slot = None
