"""The SSE reader of upstream streams gives the same events however the network splits the bytes.

Its twin in the browser, frontend/stream.js, is held to the same at every byte offset
(frontend/tests/stream.test.mjs).
"""

import random

from common.sse import ServerSentEvent, SSEParser

# An upstream answer as an OpenAI-compatible server sends it, plus what proxies and other
# servers may do to it: CRLF and CR line ends, comments, an id field, an event without data,
# a named event, multi-line data, and characters of every UTF-8 width.
RECORDED = "".join([
    ": connected\r\n\r\n",
    'data: {"choices": [{"delta": {"role": "assistant"}}]}\r\n\r\n',
    'data: {"choices": [{"delta": {"content": "Hel"}}]}\n\n',
    'id: 7\ndata: {"choices": [{"delta": {"content": "lo, 世界 👋🏽"}}]}\n\n',
    ": ping\n\n",
    'data: {"choices": [{"delta": {"content": "é and 🇫🇷"}}]}\r\r',
    "event: ignored\n\n",
    "event: note\ndata: line one\ndata:line two\ndata:  indented\n\n",
    'data: {"choices": [{"delta": {}, "finish_reason": "stop"}]}\n\n',
    "data: [DONE]\n\n",
])
BYTES = RECORDED.encode()

EXPECTED = [
    ServerSentEvent('{"choices": [{"delta": {"role": "assistant"}}]}'),
    ServerSentEvent('{"choices": [{"delta": {"content": "Hel"}}]}'),
    ServerSentEvent('{"choices": [{"delta": {"content": "lo, 世界 👋🏽"}}]}'),
    ServerSentEvent('{"choices": [{"delta": {"content": "é and 🇫🇷"}}]}'),
    ServerSentEvent("line one\nline two\n indented", event="note"),
    ServerSentEvent('{"choices": [{"delta": {}, "finish_reason": "stop"}]}'),
    ServerSentEvent("[DONE]"),
]


def events_of(reads: list[bytes]) -> list[ServerSentEvent]:
    parser = SSEParser()
    return [event for read in reads for event in parser.feed(read)]


def split_at(data: bytes, offsets: list[int]) -> list[bytes]:
    edges = [0, *offsets, len(data)]
    return [data[start:end] for start, end in zip(edges, edges[1:])]


def test_the_recorded_stream_in_one_read_gives_every_event_in_order():
    assert events_of([BYTES]) == EXPECTED


def test_the_recording_has_characters_of_two_three_and_four_bytes_to_split():
    assert {len(character.encode()) for character in RECORDED} == {1, 2, 3, 4}


def test_split_into_two_reads_at_every_byte_offset_the_same_events_come_out():
    for offset in range(1, len(BYTES)):
        assert events_of(split_at(BYTES, [offset])) == EXPECTED, f"split at byte {offset}"


def test_one_byte_per_read_gives_the_same_events():
    assert events_of([BYTES[i:i + 1] for i in range(len(BYTES))]) == EXPECTED


def test_random_splits_into_several_reads_give_the_same_events():
    rng = random.Random(12345)
    for _ in range(300):
        offsets = sorted(rng.sample(range(1, len(BYTES)), rng.randint(2, 12)))
        assert events_of(split_at(BYTES, offsets)) == EXPECTED, f"splits at {offsets}"


def test_an_event_comes_out_only_once_its_blank_line_has_arrived():
    parser = SSEParser()

    assert parser.feed(b'data: {"a": 1}\r\n') == []
    assert parser.feed(b"\r") == []  # a CR may be the start of CRLF: nothing is decided yet
    assert parser.feed(b"\n") == [ServerSentEvent('{"a": 1}')]
