"""The cancel check's windows: the survivors' gaps before the cancel and after the server dropped
the cancelled streams, each over a batch that does not change."""

import pytest

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


# Two runs read N/A so: the window after the drop came out empty.
EARLY_ENDS = {
    # 714b7f1's published run (F32): a survivor sent its last token between the cancel and the
    # server's drop.
    "between_the_cancel_and_the_drop": (record(5, 0.0, 1.125), 14 + 13),
    # 1f896e2's quick bfloat16 run: a survivor's answer ran out less than a step after the
    # drop, before any survivor had a gap in the window; the window starts again at its end
    # (1.3125 s).
    "within_a_step_of_the_drop": (record(5, 0.0625, 1.3125), 13 + 13),
}


@pytest.mark.parametrize("ends_early", EARLY_ENDS.values(), ids=EARLY_ENDS.keys())
def test_a_survivor_that_ends_early_leaves_the_window_after_to_the_others(ends_early):
    ended, gaps = ends_early
    still_decoding = [record(1, 0.0, 3.0), record(3, 0.0625, 3.0625)]
    _, after = survivor_windows([ended, *still_decoding], steady_from=0.0625, cancelled_at=1.0,
                                dropped_at=1.25)

    assert after == [GAP] * gaps


def test_without_a_drop_the_window_after_starts_at_the_cancel():
    survivors = [record(1, 0.0, 2.0), record(3, 0.0625, 3.0625)]
    _, after = survivor_windows(survivors, steady_from=0.0625, cancelled_at=1.0, dropped_at=None)

    assert after == [GAP] * (8 + 7)


def test_no_window_after_where_every_survivor_ended_before_the_drop():
    survivors = [record(1, 0.0, 1.125), record(3, 0.0625, 1.1875)]
    _, after = survivor_windows(survivors, steady_from=0.0625, cancelled_at=1.0, dropped_at=1.25)

    assert after == []
