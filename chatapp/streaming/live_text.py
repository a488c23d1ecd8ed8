"""One answer's own text as a web process has heard it, by character offset: contiguous from the
first character, with the pieces that came past a gap held until it is filled.

Pieces come from the answer's live channel (the relay's deltas and its answers to an
announcement, live_channel.py) and from its saved rows; they overlap and repeat freely, and each
character is kept once, at its offset. Offsets count code points, as a Stop's `seen_chars` does.
"""


class LiveText:
    def __init__(self) -> None:
        self.text = ""
        self.held: list[tuple[int, str]] = []  # (offset, text) past the end, until it reaches them

    @property
    def end(self) -> int:
        return len(self.text)

    def has_gap(self) -> bool:
        return bool(self.held)

    def add(self, offset: int, text: str) -> bool:
        """Takes a piece at its offset. True when the text grew."""
        if offset > self.end:
            self.held.append((offset, text))
            return False
        before = self.end
        self._join(offset, text)
        self.held.sort(key=lambda piece: piece[0])
        while self.held and self.held[0][0] <= self.end:
            self._join(*self.held.pop(0))
        return self.end > before

    def after(self, offset: int) -> str:
        """The characters from `offset` on (none when the text does not reach past it)."""
        return self.text[offset:]

    def settle(self, final: str) -> None:
        """The answer ended: its final text is the text (a Stop may have cut it shorter)."""
        self.text, self.held = final, []

    def _join(self, offset: int, text: str) -> None:
        if offset + len(text) > self.end:
            self.text += text[self.end - offset:]
