"""Under INFERENCE_COMPILE=auto the compiled step serves only where it was timed faster than the
fused forward, by the median of alternate steps."""

import torch

from inference.engine.attention import GroupDecode
from inference.engine.step_trial import StepKind, StepPath, StepTrial, StepTrials


def timed(trial: StepTrial, graph: list[float], fused: list[float]) -> list[StepPath]:
    """Feeds the trial the times in the order it asks for them; returns that order."""
    asked, times = [], {StepPath.GRAPH: iter(graph), StepPath.FUSED: iter(fused)}
    while trial.winner is None:
        path = trial.next_path()
        asked.append(path)
        trial.record(path, next(times[path]))
    return asked


def test_the_two_ways_alternate_until_each_has_its_samples_and_the_lower_median_wins():
    trial = StepTrial(samples=3)

    asked = timed(trial, graph=[0.020, 0.019, 0.5], fused=[0.025, 0.024, 0.026])

    assert asked == [StepPath.GRAPH, StepPath.FUSED] * 3
    assert trial.winner is StepPath.GRAPH  # one slow step (0.5 s) does not move a median
    assert trial.next_path() is StepPath.GRAPH


def test_a_fused_forward_faster_by_median_wins():
    trial = StepTrial(samples=3)

    timed(trial, graph=[0.030, 0.031, 0.001], fused=[0.025, 0.024, 0.026])

    assert trial.winner is StepPath.FUSED and trial.next_path() is StepPath.FUSED


def test_the_decision_is_made_once_and_later_times_change_nothing():
    trial = StepTrial(samples=1)
    assert trial.record(StepPath.GRAPH, 0.02) is False
    assert trial.record(StepPath.FUSED, 0.01) is True

    assert trial.record(StepPath.GRAPH, 0.0) is False
    assert trial.winner is StepPath.FUSED


def test_each_kind_of_step_is_decided_by_its_own_trial():
    # A lone stream's step with a short context and with a long one: the graph computes four
    # rows' attention for one, which a long context can make the slower way.
    short, long = StepKind(rows=1, context=256), StepKind(rows=1, context=2048)
    trials = StepTrials(samples=2)

    timed(trials.of(short), graph=[0.020, 0.021], fused=[0.026, 0.025])
    assert trials.winners() == {short: StepPath.GRAPH}
    timed(trials.of(long), graph=[0.048, 0.047], fused=[0.043, 0.042])

    assert trials.winners() == {short: StepPath.GRAPH, long: StepPath.FUSED}
    assert trials.of(short).next_path() is StepPath.GRAPH  # deciding one kind leaves the other as it was


def test_steps_are_told_apart_by_their_decoding_rows_and_context_to_a_power_of_two():
    def kind(rows: list[int], length: int) -> StepKind:
        span = rows[-1] - rows[0] + 1
        return StepKind.of([GroupDecode(0, 0, len(rows), torch.tensor(rows), torch.tensor(rows), rows[0], span,
                                        None, length, None)])

    # Either way computes the decoding rows alone, whichever rows of the cache they are.
    assert kind([0], 100) == kind([2], 128) == StepKind(rows=1, context=128)
    assert kind([0], 1024) == StepKind(rows=1, context=1024)
    assert kind([0], 1025) == StepKind(rows=1, context=2048)
    assert kind([0], 3) == StepKind(rows=1, context=64)  # at least one cache block
    assert kind([0, 2], 100) == StepKind(rows=2, context=128)
    assert kind([0, 1, 2, 3], 1000) == StepKind(rows=4, context=1024)
