"""Server-sent events read from upstream: an incremental parser.

The parser takes network reads as they come: half an event, several events, a multi-byte
character split across reads, CRLF or CR line ends, comments, multi-line `data:`.
"""

import codecs
from dataclasses import dataclass


@dataclass(frozen=True)
class ServerSentEvent:
    data: str
    event: str = "message"


class SSEParser:
    def __init__(self):
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""  # text after the last complete line
        self._data: list[str] = []
        self._event = ""

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        self._pending += self._decoder.decode(chunk)
        events = []
        while True:
            line, separator, rest = _split_line(self._pending)
            if separator is None:
                return events
            self._pending = rest
            event = self._take_line(line)
            if event is not None:
                events.append(event)

    def _take_line(self, line: str) -> ServerSentEvent | None:
        if line == "":
            if not self._data:
                self._event = ""
                return None
            event = ServerSentEvent("\n".join(self._data), self._event or "message")
            self._data, self._event = [], ""
            return event
        if line.startswith(":"):
            return None  # a comment: heartbeats
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        return None


def _split_line(text: str) -> tuple[str, str | None, str]:
    """The first line of `text`, its end (None while it may not be complete), and the rest."""
    newline, carriage = text.find("\n"), text.find("\r")
    if carriage == -1 or (newline != -1 and newline < carriage):
        if newline == -1:
            return "", None, text
        return text[:newline], "\n", text[newline + 1:]
    if carriage + 1 == len(text):
        return "", None, text  # a CR alone or the start of CRLF: wait for the next read
    end = 2 if text[carriage + 1] == "\n" else 1
    return text[:carriage], text[carriage:carriage + end], text[carriage + end:]
