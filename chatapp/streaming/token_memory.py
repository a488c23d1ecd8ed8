"""What this process learned from the upstream's counts, so that a prompt is chosen well before
it is counted: each message's tokens, each conversation's last count, and each upstream's
tokens per byte.

A count says the tokens of one whole prompt. The conversation's last count explains all of it
but what changed since; the rest (the messages new to it, usually the last answer and the new
question) is shared out among the new messages: each takes a template's tokens and a part of
the remainder in proportion to its bytes. Before any count, or for a message never counted, an
estimate: the upstream's tokens per byte once learned, three bytes a token before.
An answer generated whole takes its share from the tokens the upstream generated for it, when
it ends (Memory.answered). A share is exact for the sum of the messages counted new together,
and near for each one: the
fit (chatapp/streaming/prompt_fit.py) checks its choice by the count and never trusts a share for more
than a floor. The first count of a conversation also holds the template's fixed tokens (a
default system prompt, the answer's opening): they go to its messages' shares.
"""

import hashlib
import math
from collections import Counter, OrderedDict
from dataclasses import dataclass

from ..models import Message

# A message's role and markers in a chat template (ChatML's <|im_start|>, role, newline,
# <|im_end|>, newline; Llama 3's header and end of turn are as many).
TEMPLATE_TOKENS = 5
# Before any count: byte-level BPE gives at least about three bytes a token in practice.
BYTES_PER_TOKEN = 3
# No token of a byte-level BPE vocabulary is longer than this many bytes in practice: what
# leaving a message out surely saves, and how far back a prompt can reach at all.
MAX_BYTES_PER_TOKEN = 16
# How far a prompt's estimate from shares may fall short: each share of a message counted with
# others is near, not exact (a token or two on the real model).
_ERROR_TOKENS = 16


class _Bounded(OrderedDict):
    """A dict that forgets its least recently used entries beyond `size`."""

    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def get(self, key, default=None):
        if key not in self:
            return default
        self.move_to_end(key)
        return self[key]

    def put(self, key, value) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)


# Bounded for the conversations going on, not for every one ever held: about 1.4 KB a conversation
# of three messages, so about 6 MiB a process when full (at 200,000 and 20,000 entries it was
# 60 MiB, filling for hours: RELIABILITY.md's soak). What is forgotten costs one count of a whole
# prompt by the upstream in place of its new messages, and an estimate by the learned rate.
_shares = _Bounded(20_000)  # (upstream, model, piece key) -> tokens
# (upstream, model, conversation) -> (tokens, how often each piece was in it, their shares)
_last_counts = _Bounded(2_000)
_rates: dict[tuple[str, str], tuple[int, int]] = {}  # (upstream, model) -> (text tokens, bytes)


def forget() -> None:
    _shares.clear()
    _last_counts.clear()
    _rates.clear()


@dataclass(frozen=True)
class Piece:
    """One message of a prompt as the upstream is sent it, with what identifies its tokens."""

    entry: dict
    message: Message | None  # None for the system prompt
    key: bytes  # of its role and text: the same words cost the same tokens
    size: int  # bytes of its text

    @classmethod
    def of(cls, role: str, content: str, message: Message | None = None) -> "Piece":
        data = content.encode()
        key = hashlib.blake2b(role.encode() + b"\0" + data, digest_size=16).digest()
        return cls({"role": role, "content": content}, message, key, len(data))

    @property
    def is_question(self) -> bool:
        return self.entry["role"] == "user"

    @property
    def floor(self) -> int:
        """The fewest tokens leaving this message out surely saves."""
        return 1 + self.size // MAX_BYTES_PER_TOKEN


class Memory:
    """What earlier counts say about one conversation's prompts on one upstream."""

    def __init__(self, url: str, model: str, conversation_id: int):
        self.scope = (url, model)
        self.last_key = (url, model, conversation_id)

    def _share(self, piece: Piece) -> int | None:
        return _shares.get((*self.scope, piece.key))

    def estimate_of(self, piece: Piece) -> int:
        share = self._share(piece)
        if share is not None:
            return share
        tokens, size = _rates.get(self.scope, (0, 0))
        if size:
            return TEMPLATE_TOKENS + math.ceil(piece.size * tokens / size)
        return TEMPLATE_TOKENS + 1 + piece.size // BYTES_PER_TOKEN

    def _changes(self, pieces: list[Piece]) -> tuple[int, list[Piece], int]:
        """Against the conversation's last count: its tokens, the pieces added since (once for
        each time more than then), and the shares of those no longer there."""
        then, counts_then, shares_then = _last_counts.get(self.last_key) or (0, Counter(), {})
        now = Counter(piece.key for piece in pieces)
        pieces_by_key = {piece.key: piece for piece in pieces}
        added = [pieces_by_key[key] for key, times in (now - counts_then).items() for _ in range(times)]
        removed = sum(shares_then[key] * times for key, times in (counts_then - now).items())
        return then, added, removed

    def new_since_last(self, pieces: list[Piece]) -> tuple[int, list[Piece]] | None:
        """The conversation's last count and the pieces added since, when they are the prompt's
        end and all it held is still there; None otherwise (a first count, an edit, a cut)."""
        if _last_counts.get(self.last_key) is None:
            return None
        then, added, removed = self._changes(pieces)
        tail = [piece.key for piece in pieces[len(pieces) - len(added):]]
        if removed or not added or tail != [piece.key for piece in added]:
            return None
        return then, added

    def forget_last(self) -> None:
        _last_counts.pop(self.last_key, None)

    def estimate(self, pieces: list[Piece]) -> int:
        """The tokens of a prompt: the conversation's last count, corrected by what changed."""
        then, added, removed = self._changes(pieces)
        return then + sum(self.estimate_of(piece) for piece in added) - removed

    def start_that_fits(self, system: list[Piece], messages: list[Piece], budget: int) -> int:
        """The index of the oldest question from which on the prompt may fit, by estimate; the
        newest message's when none does. A prompt within the estimate's error of the budget
        is taken: its count decides, and one that proves too long loses its oldest exchange,
        so that an exchange is never left out that would have fitted."""
        tokens = self.estimate(system + messages)
        for start, piece in enumerate(messages[:-1]):
            if tokens <= budget + _ERROR_TOKENS + budget // 100 and piece.is_question:
                return start
            tokens -= self.estimate_of(piece)
        return len(messages) - 1

    def answered(self, text: str, completion_tokens: int, ended_by_stop: bool) -> None:
        """An answer the upstream generated whole: its tokens are the ones it counted (the end of
        turn among them when it stopped), so that the next count has only the question new."""
        if self._share(Piece.of("assistant", text)) is None:
            content = completion_tokens - 1 if ended_by_stop else completion_tokens
            _shares.put((*self.scope, Piece.of("assistant", text).key), TEMPLATE_TOKENS + max(content, 0))

    def learn(self, pieces: list[Piece], tokens: int) -> None:
        """The upstream counted `tokens` for exactly these pieces."""
        then, added, removed = self._changes(pieces)
        new = [piece for piece in added if self._share(piece) is None]
        explained = then + sum(self.estimate_of(piece) for piece in added if piece not in new) - removed
        text_tokens = tokens - explained - TEMPLATE_TOKENS * len(new)
        size = sum(piece.size for piece in new)
        if new and text_tokens >= 0:
            for piece in new:
                part = text_tokens * piece.size / size if size else text_tokens / len(new)
                _shares.put((*self.scope, piece.key), TEMPLATE_TOKENS + round(part))
            if size:
                rate_tokens, rate_size = _rates.get(self.scope, (0, 0))
                _rates[self.scope] = (rate_tokens + text_tokens, rate_size + size)
        _last_counts.put(self.last_key, (tokens, Counter(piece.key for piece in pieces),
                                         {piece.key: self.estimate_of(piece) for piece in pieces}))
