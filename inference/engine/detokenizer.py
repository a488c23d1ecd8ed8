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


class IncrementalDetokenizer:
    def __init__(self, decode: Decode, stop: Sequence[str] = ()):
        self._decode = decode
        self._stop = tuple(s for s in stop if s)
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
            self.text += new_text[len(prefix_text):]
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
            self.text = whole
        return self._release(final=True)

    def _release(self, final: bool) -> str:
        end = len(self.text)
        if self._stop:
            # Held-back text is the only place a stop string can begin.
            found = [i for i in (self.text.find(s, self._emitted) for s in self._stop) if i >= 0]
            if found:
                self.stopped = True
                self.text = self.text[: min(found)]
                end = len(self.text)
            elif not final:
                end -= self._longest_stop_prefix_at_end()
        if not final and not self.stopped and self.text[:end].endswith(ZERO_WIDTH_JOINER):
            end -= 1
        end = max(end, self._emitted)
        delta = self.text[self._emitted:end]
        self._emitted = end
        return delta

    def _longest_stop_prefix_at_end(self) -> int:
        longest = 0
        for stop in self._stop:
            for size in range(min(len(stop) - 1, len(self.text)), longest, -1):
                if self.text.endswith(stop[:size]):
                    longest = size
                    break
        return longest
