"""A watch stream's text by offset: a delta the layer dropped is a gap, filled from the rows
(read again until they hold it); deltas held past it follow in order; what was sent is never
sent twice."""

from chatapp.models import Generation
from chatapp.selectors import Progress
from chatapp.streaming.watch import Watch

WHOLE = "Hello big world!"


def watch_over(saved_lengths: list[int]) -> tuple[Watch, list[int]]:
    """A watch that holds "Hello", whose row reads save WHOLE up to each length in turn."""
    watch, asked = Watch(1, layer=None, channel="test"), []

    async def read(*, generation_id: int, after: int = 0) -> Progress:
        asked.append(after)
        saved = WHOLE[:saved_lengths.pop(0)]
        return Progress(Generation(status="streaming"), len(saved), saved[after:], len(saved))

    watch.read, watch.sent = read, len("Hello")
    return watch, asked


async def test_a_delta_past_a_gap_is_held_until_the_rows_fill_the_gap_then_follows_in_order():
    watch, asked = watch_over(saved_lengths=[7, 15])

    first = await watch._deliver(10, "world")  # " big " was dropped; the rows have " b" of it
    second = await watch._deliver(15, "!")  # still past what was sent: the rows again

    assert (first, second) == (" b", "ig world!")
    assert "Hello" + first + second == WHOLE
    assert asked == [5, 7]  # each read starts where the page's text ends
    assert watch.sent == len(WHOLE) and watch.held == []


async def test_a_delta_that_overlaps_what_was_sent_gives_only_the_new_characters_and_a_repeat_nothing():
    watch, asked = watch_over(saved_lengths=[])

    overlapping = await watch._deliver(3, "lo big")
    repeated = await watch._deliver(0, "Hello big")

    assert (overlapping, repeated) == (" big", "")
    assert asked == []  # no gap, no read
