"""The cancel check's windows: the survivors' gaps before the cancel and after the server dropped
the cancelled streams, each over a batch that does not change."""

from benchmarks.cancel_check import survivor_windows
from benchmarks.latency import RequestRecord

# Times in eighths of a second: binary fractions, so no gap lands on a window's edge by rounding.
GAP = 0.125


def record(index: int, first: float, last: float) -> RequestRecord:
    arrivals = [first + k * GAP for k in range(round((last - first) / GAP) + 1)]
    return RequestRecord(index, max_tokens=256, num_prompt_tokens=40, sent_at=0.0,
                         arrivals=arrivals)


def test_the_window_before_holds_the_survivors_gaps_from_the_last_first_token_to_the_cancel():
    survivors = [record(1, 0.0, 3.0), record(3, 0.0625, 3.0625)]
    before, _ = survivor_windows(survivors, steady_from=0.0625, cancelled_at=1.0, dropped_at=1.25)

    assert before == [GAP] * (7 + 7)


def test_the_window_after_runs_from_the_drop_until_the_first_survivor_ends():
    survivors = [record(1, 0.0, 2.0), record(3, 0.0625, 3.0625)]
    _, after = survivor_windows(survivors, steady_from=0.0625, cancelled_at=1.0, dropped_at=1.25)

    # Record 1's gaps from 1.25 s to 2.0 s, record 3's from 1.3125 s to 1.9375 s.
    assert after == [GAP] * (6 + 5)


def test_a_survivor_that_ends_before_the_drop_does_not_close_the_window_after_it():
    # The published run of 714b7f1: one survivor sent its last token between the cancel and the
    # server's drop, and the window after the drop came out empty (the check read N/A).
    ended_early = record(5, 0.0, 1.125)
    still_decoding = [record(1, 0.0, 3.0), record(3, 0.0625, 3.0625)]
    _, after = survivor_windows([ended_early, *still_decoding], steady_from=0.0625,
                                cancelled_at=1.0, dropped_at=1.25)

    assert after == [GAP] * (14 + 13)


def test_without_a_drop_the_window_after_starts_at_the_cancel():
    survivors = [record(1, 0.0, 2.0), record(3, 0.0625, 3.0625)]
    _, after = survivor_windows(survivors, steady_from=0.0625, cancelled_at=1.0, dropped_at=None)

    assert after == [GAP] * (8 + 7)
