"""A relayed stream is counted by its text, whatever the events it came in, and checked exactly."""

import json

from benchmarks.relay_stream import Round, Stream, summarize, take_openai_event, take_relay_event
from benchmarks.relay_upstream import TOKEN_WIDTH, answer_text, token_text


def relayed(*texts: str, start: float = 0.0, step: float = 0.02) -> Stream:
    stream = Stream(sent_at=start)
    for index, text in enumerate(texts):
        take_relay_event(stream, "delta", json.dumps({"text": text}), start + 0.03 + index * step)
    take_relay_event(stream, "done", "{}", start + 1.0)
    return stream


def test_every_token_of_the_stand_in_has_the_same_width():
    assert {len(token_text(i)) for i in (0, 7, 99, 1234, 10_001)} == {TOKEN_WIDTH}


def test_tokens_merged_into_one_event_are_counted_one_by_one():
    stream = relayed(token_text(0), token_text(1) + token_text(2) + token_text(3))

    assert (stream.tokens, stream.events) == (4, 2)


def test_a_stream_with_the_upstreams_text_in_order_is_complete():
    stream = relayed(token_text(0) + token_text(1), token_text(2))

    stream.check(3)

    assert stream.ok


def test_a_missing_token_a_swapped_pair_or_a_missing_end_is_an_error():
    missing = relayed(token_text(0))
    swapped = relayed(token_text(1), token_text(0))
    unended = Stream()
    unended.add_text(answer_text(2), 0.1)

    for stream in (missing, swapped, unended):
        stream.check(2)

    assert "1 of 2 tokens" in missing.error
    assert "differs" in swapped.error
    assert unended.error == "no end of stream"


def test_an_error_event_fails_the_stream_whatever_its_text():
    stream = relayed(token_text(0))
    take_relay_event(stream, "error", '{"message": "upstream gone"}', 0.5)

    stream.check(1)

    assert "upstream gone" in stream.error


def test_the_direct_path_reads_the_openai_chunks_and_its_done_marker():
    stream = Stream()
    for text in (token_text(0), token_text(1) + token_text(2)):
        take_openai_event(stream, json.dumps({"choices": [{"delta": {"content": text}}]}), 0.1)
    take_openai_event(stream, json.dumps({"choices": [], "usage": {}}), 0.2)
    take_openai_event(stream, "[DONE]", 0.3)

    stream.check(3)

    assert stream.ok and stream.events == 2 and stream.finished_at == 0.3


def test_gaps_are_between_events_that_carried_text():
    stream = relayed(token_text(0), token_text(1), step=0.05)

    assert [round(gap, 3) for gap in stream.gaps] == [0.05]
    assert round(stream.ttft, 3) == 0.03


def test_a_summary_counts_delivered_tokens_over_the_time_text_moved_and_cpu_per_token():
    # Two streams, 10 tokens each, text moving from 0.03 s to 0.43 s after the start.
    first = relayed(answer_text(10)[:25], answer_text(10)[25:], step=0.4)
    second = relayed(answer_text(10), start=0.0)
    for stream in (first, second):
        stream.check(10)
    done = Round([first, second], wall_s=2.0, cpu_s={"daphne": 0.002, "client": 1.0})

    figures = summarize("steady through", [done])

    assert figures["ok"] == 2 and figures["tokens"] == 20 and figures["events"] == 3
    assert round(figures["delivered_tok_s"]) == 50  # 20 tokens over 0.4 s
    assert round(figures["daphne_cpu_us_per_token"]) == 100
    assert figures["events_per_token"] == 3 / 20
    assert figures["cpu_cores"] == {"daphne": 0.001, "client": 0.5}
