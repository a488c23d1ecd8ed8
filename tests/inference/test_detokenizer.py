"""Text goes out in whole characters, adds up to the tokenizer's own decode, and stops cleanly."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inference.engine.detokenizer import IncrementalDetokenizer
from tests.inference import models

SAMPLES = [
    "Plain ASCII text, with punctuation: done.",
    "Emoji 👍🏽 and a family 👨‍👩‍👧 and flags 🇫🇷🇯🇵 in a row 🎉🎉",
    "中文文本：你好，世界！日本語のテキストも。한국어도 있어요.",
    "Mixed: naïve café, Ελληνικά, русский, עברית, العربية 🙂",
]


def decode(ids):
    return models.tokenizer().decode(ids, skip_special_tokens=True)


def stream(text: str, stop=()):
    """Feeds `text`'s tokens one at a time; returns the deltas and the detokenizer."""
    ids = models.tokenizer().encode(text, add_special_tokens=False)
    detokenizer = IncrementalDetokenizer(decode, stop)
    deltas = [detokenizer.add(ids[: i + 1]) for i in range(len(ids))]
    deltas.append(detokenizer.finish(ids))
    return ids, deltas, detokenizer


@pytest.mark.parametrize("text", SAMPLES)
def test_deltas_add_up_to_the_tokenizers_decode_of_the_whole_output(text):
    ids, deltas, _ = stream(text)

    assert "".join(deltas) == decode(ids)


@pytest.mark.parametrize("text", SAMPLES[1:])
def test_no_delta_ever_carries_half_a_character(text):
    ids, deltas, _ = stream(text)

    assert len(ids) > len([d for d in deltas if d])  # some characters did span tokens
    for delta in deltas:
        assert "\ufffd" not in delta
        delta.encode("utf-8", errors="strict")


def test_a_zero_width_joiner_is_held_until_the_glyph_continues():
    _, deltas, _ = stream("family 👨‍👩‍👧 here")

    assert not any(delta.endswith("\u200d") for delta in deltas[:-1])


def test_a_stop_string_that_spans_tokens_ends_the_text_and_is_never_emitted():
    text = "Alpha beta. The END marker follows: and then more text"
    ids, deltas, detokenizer = stream(text, stop=("END marker",))

    assert len(models.tokenizer().encode("END marker", add_special_tokens=False)) > 1
    assert "".join(deltas) == "Alpha beta. The "
    assert detokenizer.stopped


def test_text_that_only_looks_like_the_start_of_a_stop_string_is_released():
    ids, deltas, detokenizer = stream("an END of sorts, not the end", stop=("END marker",))

    assert "".join(deltas) == decode(ids)
    assert not detokenizer.stopped


def test_the_earliest_of_several_stop_strings_wins():
    _, deltas, _ = stream("one two three four", stop=("four", "two"))

    assert "".join(deltas) == "one "


@pytest.mark.parametrize("text", ["Thumbs 👍", "Greeting 你", "Party 🎉"])
def test_an_answer_cut_inside_a_character_ends_before_it_without_a_replacement_mark(text):
    ids = models.tokenizer().encode(text, add_special_tokens=False)
    cut = ids[:-1]  # the last character's final byte never came: as max_tokens cuts it
    assert decode(cut).endswith("\ufffd")  # the character does span tokens

    detokenizer = IncrementalDetokenizer(decode)
    deltas = [detokenizer.add(cut[: i + 1]) for i in range(len(cut))]
    deltas.append(detokenizer.finish(cut))

    assert "".join(deltas) == text[:-1]


def cut_by_plain_search(text: str, stops: list[str], boundaries: list[int]) -> str:
    """What the answer says, by a plain search of the text at each point it grows: it ends at
    the earliest start of the stop strings whole at the first point where one is."""
    for boundary in boundaries:
        starts = [text[:boundary].find(stop) for stop in stops]
        if any(start >= 0 for start in starts):
            return text[:min(start for start in starts if start >= 0)]
    return text


@settings(max_examples=400, deadline=None)
@given(text=st.text(alphabet="ab", max_size=40),
       stops=st.lists(st.text(alphabet="ab", min_size=1, max_size=6), min_size=1, max_size=4),
       steps=st.lists(st.integers(min_value=1, max_value=5), min_size=1))
def test_stop_strings_cut_the_text_where_a_plain_search_would_and_none_of_them_goes_out(text, stops, steps):
    # One character a token; repetitive text and stops, where a partial match must fall back.
    boundaries = list(itertools.accumulate(steps * (len(text) + 1)))
    boundaries = [b for b in boundaries if b < len(text)] + [len(text)]
    detokenizer = IncrementalDetokenizer(lambda ids: "".join(map(chr, ids)), stops)
    ids = [ord(c) for c in text]

    deltas = [detokenizer.add(ids[:boundary]) for boundary in boundaries]
    deltas.append(detokenizer.finish(ids))

    assert "".join(deltas) == cut_by_plain_search(text, stops, boundaries)
