"""Finished sequences' cache rows kept for reuse, and the longest prefix a new prompt shares.

A chat client sends the whole conversation every turn, so turn N's prompt starts with turn
N-1's prompt and answer, whose keys and values the cache held a moment ago. Keeping the row
of a finished sequence, with the token ids its keys and values stand for, lets the next turn
feed only its new tokens. Keys and values depend only on the model and the tokens before them
(never on sampling), and one engine serves one model, so a row holding the same tokens holds
the same keys and values.

Kept rows leave in least-recently-used order whenever a reservation needs their memory, and
whenever they would hold more tokens than their own budget (the scheduler keeps both).
"""

from collections import OrderedDict
from dataclasses import dataclass

from .kv_cache import CacheSlot

# Lists compared a slice at a time: Python compares two equal slices far faster than it
# walks them one element at a time.
_COMPARE_SPAN = 64


@dataclass(frozen=True)
class PrefixMatch:
    slot: CacheSlot
    num_tokens: int  # leading tokens whose keys and values the slot holds for this prompt
    is_kept: bool  # a kept row (it may be adopted) rather than a running sequence's (copy only)
    num_source_tokens: int  # tokens the source row holds


class PrefixCache:
    def __init__(self):
        self._kept: OrderedDict[CacheSlot, list[int]] = OrderedDict()  # oldest use first

    def __len__(self) -> int:
        return len(self._kept)

    def keep(self, slot: CacheSlot, token_ids: list[int]) -> None:
        self._kept[slot] = token_ids

    def take(self, slot: CacheSlot) -> list[int]:
        """Forgets a kept row (adopted or dropped); the caller frees or reuses it."""
        return self._kept.pop(slot)

    def touch(self, slot: CacheSlot) -> None:
        self._kept.move_to_end(slot)

    def oldest(self, sparing: CacheSlot | None = None) -> CacheSlot | None:
        """The least recently used kept row other than `sparing`, or None."""
        return next((slot for slot in self._kept if slot != sparing), None)

    def kept_slots(self) -> list[CacheSlot]:
        """Kept rows, least recently used first."""
        return list(self._kept)

    def kept_token_ids(self) -> list[list[int]]:
        """The tokens each kept row stands for, least recently used first."""
        return list(self._kept.values())

    def clear(self) -> list[CacheSlot]:
        slots = list(self._kept)
        self._kept.clear()
        return slots

    def longest_match(self, prompt: list[int],
                      running: list[tuple[CacheSlot, list[int]]]) -> PrefixMatch | None:
        """The row sharing the longest prefix with `prompt`, kept rows first on a tie.

        `running` lists running sequences' rows with the tokens already cached in them. At
        least the prompt's last token is always left to feed: the step that feeds it yields the
        first answer token.
        """
        limit = len(prompt) - 1
        best: PrefixMatch | None = None
        candidates = [(slot, tokens, True) for slot, tokens in self._kept.items()]
        candidates += [(slot, tokens, False) for slot, tokens in running]
        for slot, tokens, is_kept in candidates:
            length = min(common_prefix_length(prompt, tokens), limit)
            if length > 0 and (best is None or length > best.num_tokens):
                best = PrefixMatch(slot, length, is_kept, len(tokens))
        return best


def common_prefix_length(first: list[int], second: list[int]) -> int:
    limit = min(len(first), len(second))
    length = 0
    while length < limit:
        end = min(length + _COMPARE_SPAN, limit)
        if first[length:end] != second[length:end]:
            break
        length = end
    while length < limit and first[length] == second[length]:
        length += 1
    return length
