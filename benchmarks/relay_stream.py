"""One relayed answer as the client saw it: its events' times and text, checked exactly.

A relay may merge several tokens into one event when it falls behind, so tokens are counted
from characters (every token of the stand-in upstream is TOKEN_WIDTH characters), never from
events. The gap is the time between two events that carried text: how often text moves.
"""

import json
from collections import Counter
from dataclasses import dataclass, field

from .latency import spread
from .relay_upstream import TOKEN_WIDTH, answer_text


@dataclass
class Stream:
    sent_at: float = 0.0
    arrivals: list[float] = field(default_factory=list)  # one per event that carried text
    texts: list[str] = field(default_factory=list)
    finished_at: float | None = None
    error: str | None = None

    def add_text(self, text: str, now: float) -> None:
        if text:
            self.arrivals.append(now)
            self.texts.append(text)

    @property
    def text(self) -> str:
        return "".join(self.texts)

    @property
    def tokens(self) -> int:
        return sum(len(text) for text in self.texts) // TOKEN_WIDTH

    @property
    def events(self) -> int:
        return len(self.arrivals)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def ttft(self) -> float | None:
        return self.arrivals[0] - self.sent_at if self.arrivals else None

    @property
    def gaps(self) -> list[float]:
        return [b - a for a, b in zip(self.arrivals, self.arrivals[1:])]

    def check(self, tokens: int) -> None:
        """An error unless the stream ended and carried exactly the upstream's `tokens` tokens."""
        if self.error is not None:
            return
        if self.finished_at is None:
            self.error = "no end of stream"
        elif self.text != answer_text(tokens):
            self.error = f"the text differs from the upstream's ({self.tokens} of {tokens} tokens)"


def take_openai_event(stream: Stream, data: str, now: float) -> None:
    """One event of the OpenAI protocol (the direct path)."""
    if data == "[DONE]":
        stream.finished_at = now
        return
    for choice in json.loads(data).get("choices") or []:
        stream.add_text((choice.get("delta") or {}).get("content") or "", now)


def take_relay_event(stream: Stream, name: str, data: str, now: float) -> None:
    """One event of the app's stream (through daphne): `delta`, `done`, `error`, and the rest."""
    if name == "delta":
        stream.add_text(json.loads(data)["text"], now)
    elif name == "done":
        stream.finished_at = now
    elif name == "error":
        stream.error = f"error event: {data[:120]}"


@dataclass
class Round:
    """Streams started together, and what each process spent while they ran."""

    streams: list[Stream]
    wall_s: float  # from the start to the last stream's end
    cpu_s: dict[str, float] = field(default_factory=dict)  # process name -> CPU seconds
    other_cores: float | None = None

    @property
    def flowing_s(self) -> float:
        """From the first token of any stream to the last token of any: the time text moved."""
        times = [t for s in self.streams for t in s.arrivals]
        return max(times) - min(times) if len(times) > 1 else 0.0


def summarize(label: str, rounds: list[Round]) -> dict:
    """The figures of one measurement over its rounds. Delivered tokens/s: tokens received
    over the time text moved; CPU per token: daphne's CPU over the tokens it relayed."""
    streams = [s for r in rounds for s in r.streams]
    ok = [s for s in streams if s.ok]
    tokens = sum(s.tokens for s in streams)
    events = sum(s.events for s in streams)
    wall = sum(r.wall_s for r in rounds)
    flowing = sum(r.flowing_s for r in rounds)
    cpu = Counter()
    for r in rounds:
        cpu.update(r.cpu_s)
    others = [r.other_cores for r in rounds]
    return {
        "label": label, "streams": len(streams), "ok": len(ok),
        "error_kinds": dict(Counter(s.error for s in streams if not s.ok).most_common(5)),
        "ttft_s": spread([s.ttft for s in ok]), "gap_s": spread([g for s in ok for g in s.gaps]),
        "tokens": tokens, "events": events,
        "events_per_token": events / tokens if tokens else None,
        "delivered_tok_s": tokens / flowing if flowing else None,
        "cpu_cores": {name: seconds / wall for name, seconds in cpu.items()} if wall else {},
        "daphne_cpu_us_per_token": cpu["daphne"] / tokens * 1e6 if tokens and "daphne" in cpu
        else None,
        "other_cores": None if None in others or not others else sum(others) / len(others),
    }
