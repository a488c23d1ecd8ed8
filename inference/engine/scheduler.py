"""Decides, before each step, which sequences run and which prompt tokens they feed.

Every decoding sequence advances by one token per step. Prompts are fed in chunks from a
per-step token budget, so a long new prompt shares steps with the running streams instead of
freezing them; the budget goes to the prompt passed over longest for each token it still needs,
so a short question is not held up behind a long paste being fed. Waiting
requests join between steps whenever the cache has room; finished or aborted ones leave at once
and give their cache rows back, kept for reuse when prefix reuse is on: a joining prompt that
starts like a kept or running row takes that row over, or a copy of its shared part, and is fed
only the rest.
"""

import time
from collections import deque
from dataclasses import dataclass

from common.vocabulary import FinishReason

from .kv_cache import CacheSlot, KVCache
from .prefix_cache import PrefixCache, PrefixMatch
from .sequence import Sequence, SequenceStatus
from .step_cost import StepCost


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
                 prefill_chunk_idle: int, prefill_chunk_min: int = 16, reuse_prefixes: bool = True,
                 step_cost: StepCost | None = None, prefill_stretch: float = 2.0,
                 max_kept_tokens: int | None = None, prefill_stretch_streams: int = 1):
        self.kv_cache = kv_cache
        self.step_cost = step_cost
        self.prefill_stretch = prefill_stretch
        self.prefill_stretch_streams = prefill_stretch_streams
        self.prefixes = PrefixCache() if reuse_prefixes else None
        # Kept rows' own budget: their pages stay resident until dropped, so without it an idle
        # server would hold its whole cache budget in memory. None: only the cache budget.
        self.max_kept_tokens = max_kept_tokens
        self.max_running = max_running
        self.prefill_chunk = prefill_chunk
        self.prefill_chunk_idle = prefill_chunk_idle
        self.prefill_chunk_min = min(prefill_chunk_min, prefill_chunk)
        self.waiting: deque[Sequence] = deque()
        # The prompt fed first in the last step (see _prompts_by_response_ratio).
        self._feeding: Sequence | None = None
        self.running: list[Sequence] = []
        # Since start: requests that found a prefix, prompt tokens they did not feed, prompt
        # tokens fed.
        self.num_prefix_hits = 0
        self.num_reused_tokens = 0
        self.num_prefilled_tokens = 0

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, sequence: Sequence) -> None:
        sequence.prompt_tokens_fed_before = self.num_prefilled_tokens
        self.waiting.append(sequence)

    def schedule(self) -> list[ScheduledChunk]:
        self._admit()
        # In cache order, so that each group's decode tokens sit side by side in the step.
        decoding = sorted((s for s in self.running if not s.is_prefilling),
                          key=lambda s: (s.slot.group, s.slot.row))
        chunks = [ScheduledChunk(s, s.num_tokens - 1, [s.last_token_id]) for s in decoding]
        limit = self.prefill_chunk if decoding else self.prefill_chunk_idle
        budget = self._prompt_budget(len(decoding)) if decoding else limit
        prompts, self._feeding = self._prompts_by_response_ratio(), None
        for sequence in prompts:
            if budget == 0:
                break
            self._feeding = self._feeding or sequence
            start = sequence.num_cached_tokens
            tokens = sequence.prompt_token_ids[start:start + self._share(sequence, budget, limit)]
            chunks.append(ScheduledChunk(sequence, start, tokens))
            budget = max(0, budget - len(tokens))
            limit -= len(tokens)
            self.num_prefilled_tokens += len(tokens)
        return chunks

    def _share(self, sequence: Sequence, budget: int, limit: int) -> int:
        """The prompt tokens `sequence` is fed this step: the budget, or the whole rest where it
        is fewer than the least a step feeds past the budget (and the step's limit allows).

        Such a rest costs the same in this step or the next, for the streams beside it (a token
        each step either way); fed in a step of its own, it would cost the newcomer a whole step
        more for its first token, and everyone that step's fixed part."""
        rest = sequence.num_prompt_tokens_left
        if rest - budget < self.prefill_chunk_min and rest <= limit:
            return rest
        return budget

    def _prompts_by_response_ratio(self) -> list[Sequence]:
        """The sequences still being fed their prompt, highest response ratio first, where a
        prompt's wait is the prompt tokens fed to others since it arrived; among equal ratios
        the fewest tokens still to feed first.

        A prompt's claim grows with what it was passed over for, per token it still needs
        (Brinch Hansen's highest response ratio next, with the prompt's rest standing for its
        service time and work done for others for the time waited). Prompts that came together
        go shortest first, so short questions get their first token without waiting behind long
        pastes (the median wait falls); a long prompt's claim keeps growing while others are fed,
        so it is overtaken only by prompts that were passed over for a like share of their own
        length, and none starves. A prompt being fed is not waiting: a short question that comes
        while a long paste is fed alone goes ahead of it (when the wait was counted in seconds
        since arrival, the paste's grew while it was fed, and the question waited for the whole
        paste). Counted in tokens fed, no constant of the machine's is needed. (A turn fixed at
        arrival, the tokens fed before it came plus its own, let the question go first too, but
        in a crowd it fed prompts nearly in order of arrival: TTFT p50 at 64 streams 35 s against
        5 s, BENCHMARKS.md.)

        The prompt fed first last step stays first unless the one of highest claim has fewer
        tokens to go: a longer prompt that came after it, passed over once, would take every
        other step, and the two taking turns would both wait for both (the first's first token
        twice as late, the second's no sooner). It still waits for shorter ones, and its
        claim grows meanwhile as any other's.
        """
        fed = self.num_prefilled_tokens

        def claim(sequence: Sequence) -> tuple[float, int]:
            rest = sequence.num_prompt_tokens_left
            own = sequence.num_cached_tokens - sequence.num_reused_tokens
            passed_over = fed - sequence.prompt_tokens_fed_before - own
            return -passed_over / rest, rest

        ordered = sorted((s for s in self.running if s.is_prefilling), key=claim)
        feeding = self._feeding
        if (feeding in ordered and ordered[0] is not feeding
                and ordered[0].num_prompt_tokens_left >= feeding.num_prompt_tokens_left):
            ordered.remove(feeding)
            ordered.insert(0, feeding)
        return ordered

    def _prompt_budget(self, num_decoding: int) -> int:
        """Prompt tokens to feed beside `num_decoding` decode tokens this step.

        As many as keep the step within a stretch of a plain decode step, by what steps cost on
        this machine (step_cost.py). A prompt costs each decoding stream the same delay however
        it is cut, so the cut is only for smoothness (unless a step with prompt tokens costs far
        more than a decode step whatever it feeds, as on a GPU: then each cut pays that again,
        and `tokens_within` feeds more a step), and a stall is worth less when it holds up
        fewer people: the stretch is `prefill_stretch` among `prefill_stretch_streams` or more
        decoding streams, and grows as they get fewer so that the stall summed over them stays
        the same (stretch 1.7 among 16 streams is 3.8 among 4). The people waiting for a first
        token weigh as much as those waiting for their next: where more prompts are being fed
        than `prefill_stretch_streams` (a crowd that came at once), the summed stall may grow to
        theirs, so that the crowd joins the batch in a few long steps instead of trickling in
        while the few already answered hold every step short. Until steps of different sizes
        were seen, a fixed allowance plus one token per running stream approximates it on a
        small CPU.
        """
        learned = None
        if self.step_cost is not None:
            prompting = sum(1 for s in self.running if s.is_prefilling)
            share = max(1.0, max(self.prefill_stretch_streams, prompting) / num_decoding)
            stretch = 1.0 + (self.prefill_stretch - 1.0) * share
            learned = self.step_cost.tokens_within(num_decoding, stretch)
        if learned is None:
            learned = self.prefill_chunk_min + len(self.running)
        return max(self.prefill_chunk_min, min(self.prefill_chunk, learned))

    def finish(self, sequence: Sequence) -> None:
        """Takes a finished sequence out of the batch; its cache row is kept or freed."""
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
        """Ends everything and gives every row back, kept ones too."""
        aborted = [*self.running, *self.waiting]
        for sequence in aborted:
            if sequence.slot is not None:
                self.kv_cache.free(sequence.slot)
                sequence.slot = None
        self.running.clear()
        self.waiting.clear()
        self.drop_kept()
        return aborted

    def drop_kept(self) -> None:
        """Frees every kept row (their memory goes back; later prompts are fed whole)."""
        if self.prefixes is not None:
            for slot in self.prefixes.clear():
                self.kv_cache.drop(slot)

    def _admit(self) -> None:
        while self.waiting and len(self.running) < self.max_running:
            sequence = self.waiting[0]
            match = self._longest_match(sequence)
            slot = self._place(sequence.num_reserved_tokens, match)
            if slot is None:
                break
            self.waiting.popleft()
            sequence.slot = slot
            if match is not None:
                sequence.num_cached_tokens = sequence.num_reused_tokens = match.num_tokens
                self.num_prefix_hits += 1
                self.num_reused_tokens += match.num_tokens
            sequence.status = SequenceStatus.RUNNING
            sequence.admitted_at = time.monotonic()
            self.running.append(sequence)

    def _longest_match(self, sequence: Sequence) -> PrefixMatch | None:
        if self.prefixes is None:
            return None
        running = [(s.slot, s.prompt_token_ids[: s.num_cached_tokens]) for s in self.running]
        return self.prefixes.longest_match(sequence.prompt_token_ids, running)

    def _place(self, num_tokens: int, match: PrefixMatch | None) -> CacheSlot | None:
        """A row for a joining sequence holding `match`'s tokens, or None when none fits yet.

        A kept row that the new prompt mostly continues (the next turn of its conversation) is
        adopted as it is, or, when it is too short for the new reservation, copied and dropped:
        the new row holds the same prefix. A kept row that the new prompt shares only the start
        of (a common system prompt) is copied and stays for whoever else starts the same way.
        Kept rows give their memory up, oldest first, before a joining sequence waits for room.
        """
        continues = match is not None and match.is_kept and 2 * match.num_tokens >= match.num_source_tokens
        if continues and self.kv_cache.can_adopt(match.slot, num_tokens):
            self.prefixes.take(match.slot)
            self.kv_cache.adopt(match.slot, num_tokens)
            return match.slot
        sparing = match.slot if match is not None and match.is_kept else None
        while not self.kv_cache.can_allocate(num_tokens) and self._drop_oldest(sparing):
            pass
        if not self.kv_cache.can_allocate(num_tokens) and sparing is not None:
            self.prefixes.take(sparing)
            self.kv_cache.drop(sparing)
            return self._place(num_tokens, None)
        if not self.kv_cache.can_allocate(num_tokens):
            return None
        slot = self.kv_cache.allocate(num_tokens)
        if match is not None:
            self.kv_cache.copy_prefix(match.slot, slot, match.num_tokens)
            if continues:  # the new row holds all of it that anyone is likely to want
                self.prefixes.take(match.slot)
                self.kv_cache.drop(match.slot)
            elif match.is_kept:
                self.prefixes.touch(match.slot)
        return slot

    def _drop_oldest(self, sparing: CacheSlot | None) -> bool:
        slot = self.prefixes.oldest(sparing) if self.prefixes is not None else None
        if slot is None:
            return False
        self.prefixes.take(slot)
        self.kv_cache.drop(slot)
        return True

    def _release(self, sequence: Sequence) -> None:
        """Frees a leaving sequence's row, or keeps it with the tokens its keys stand for.

        A failed sequence's row is never kept: whatever broke it may have broken its cache.
        """
        if sequence.slot is None:
            return
        if (self.prefixes is not None and sequence.num_cached_tokens > 0
                and sequence.finish_reason is not FinishReason.ERROR):
            token_ids = sequence.cached_token_ids
            self.kv_cache.keep(sequence.slot, len(token_ids))
            self.prefixes.keep(sequence.slot, token_ids)
            while (self.max_kept_tokens is not None
                   and self.kv_cache.num_kept_tokens > self.max_kept_tokens):
                self._drop_oldest(None)
        else:
            self.kv_cache.free(sequence.slot)
        sequence.slot = None
