"""Turns a growing list of output tokens into text deltas that are always whole characters.

A character's bytes may span several tokens; decoding a window that ends inside it yields
U+FFFD, so such text is held until the character completes. The window starts a few tokens
back (`prefix_offset`) so that decoders that treat a leading space specially see the same
context every time. Stop strings end the answer and are never emitted, even when they span
tokens: text that could still become a stop string is held back until it cannot. An answer
that ends inside a character (max_tokens cut it) ends before that character.
"""

from collections.abc import Callable, Sequence

REPLACEMENT_CHARACTER = "\ufffd"
# A zero-width joiner glues the next code point into the same glyph (as in family emoji).
ZERO_WIDTH_JOINER = "\u200d"

Decode = Callable[[Sequence[int]], str]


class StopSearch:
    """One stop string followed through text as it grows (Knuth-Morris-Pratt): how much of its
    start the text ends with, and where it first occurs. Each new character costs O(1),
    amortized, however long the answer and the stop string (a plain search at every token cost
    the step thread the square of their lengths)."""

    def __init__(self, stop: str):
        self.stop = stop
        self.matched = 0  # the length of the longest start of `stop` the text ends with
        self.found_at: int | None = None  # where `stop` first occurs in the text
        # fallback[i]: the longest proper start of stop[:i + 1] that also ends it.
        self._fallback = [0] * len(stop)
        length = 0
        for i in range(1, len(stop)):
            while length and stop[i] != stop[length]:
                length = self._fallback[length - 1]
            if stop[i] == stop[length]:
                length += 1
            self._fallback[i] = length

    def follow(self, text: str, start: int) -> None:
        """Reads text[start:], the characters added since the last call."""
        stop, matched = self.stop, self.matched
        for index in range(start, len(text)):
            while matched and stop[matched] != text[index]:
                matched = self._fallback[matched - 1]
            if stop[matched] == text[index]:
                matched += 1
            if matched == len(stop):
                self.found_at = index + 1 - len(stop)
                break
        self.matched = matched


class IncrementalDetokenizer:
    def __init__(self, decode: Decode, stop: Sequence[str] = ()):
        self._decode = decode
        self._stops = [StopSearch(s) for s in stop if s]
        self._prefix_offset = 0
        self._read_offset = 0
        self.text = ""  # all whole characters decoded so far
        self._emitted = 0  # how much of `text` has gone out
        self.stopped = False

    def add(self, token_ids: Sequence[int]) -> str:
        """Takes the whole output so far (the newest token last); returns the text ready to send."""
        if self.stopped:
            return ""
        prefix_text = self._decode(token_ids[self._prefix_offset:self._read_offset])
        new_text = self._decode(token_ids[self._prefix_offset:])
        if len(new_text) > len(prefix_text) and not new_text.endswith(REPLACEMENT_CHARACTER):
            self._grow(new_text[len(prefix_text):])
            self._prefix_offset = self._read_offset
            self._read_offset = len(token_ids)
        return self._release(final=False)

    def finish(self, token_ids: Sequence[int]) -> str:
        """The rest of the text once no token will follow."""
        if self.stopped:
            return ""
        whole = self._decode(token_ids)
        if whole.endswith(REPLACEMENT_CHARACTER):
            # The answer was cut inside a character: its bytes so far decode to one U+FFFD (the
            # decoder replaces a truncated sequence as a whole), and that half is never sent.
            whole = whole[:-1]
        if whole.startswith(self.text):
            self._grow(whole[len(self.text):])
        return self._release(final=True)

    def _grow(self, new: str) -> None:
        start = len(self.text)
        self.text += new
        for search in self._stops:
            search.follow(self.text, start)

    def _release(self, final: bool) -> str:
        end = len(self.text)
        if self._stops:
            # Held-back text is the only place a stop string can begin: it is found there.
            found = [search.found_at for search in self._stops if search.found_at is not None]
            if found:
                self.stopped = True
                self.text = self.text[: min(found)]
                end = len(self.text)
            elif not final:
                end -= max(search.matched for search in self._stops)
        if not final and not self.stopped and self.text[:end].endswith(ZERO_WIDTH_JOINER):
            end -= 1
        end = max(end, self._emitted)
        delta = self.text[self._emitted:end]
        self._emitted = end
        return delta
