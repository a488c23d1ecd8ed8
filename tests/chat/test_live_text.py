"""An answer's text by offset, as a web process hears it: a piece past a gap (a delta the layer
dropped) is held until the gap is filled and then follows in order; what is held is never
taken twice."""

from chatapp.streaming.live_text import LiveText

WHOLE = "Hello big world!"


def test_a_piece_past_a_gap_is_held_until_the_gap_is_filled_then_follows_in_order():
    text = LiveText()
    text.add(0, "Hello")

    grew_past_gap = text.add(10, "world")  # " big " was dropped
    grew_at_end = text.add(15, "!")
    filled = text.add(5, " b") and text.add(7, "ig ")

    assert (grew_past_gap, grew_at_end, filled) == (False, False, True)
    assert text.text == WHOLE and not text.has_gap()


def test_a_piece_that_overlaps_the_text_adds_only_its_new_characters_and_a_repeat_nothing():
    text = LiveText()
    text.add(0, "Hello")

    overlapping = text.add(3, "lo big")
    repeated = text.add(0, "Hello big")

    assert (overlapping, repeated) == (True, False)
    assert text.text == "Hello big" and text.after(6) == "big"


def test_the_final_text_replaces_the_heard_one_even_when_a_stop_cut_it_shorter():
    text = LiveText()
    text.add(0, "Hello big")
    text.add(12, "ld")

    text.settle("Hel")

    assert (text.text, text.after(5), text.has_gap()) == ("Hel", "", False)
