"""The one percentile (common/percentiles.py): nearest rank, always an observed value."""

import pytest

from common.percentiles import percentile


@pytest.mark.parametrize(("values", "p", "expected"), [
    ([15, 20, 35, 40, 50], 30, 20),  # rank ceil(1.5) = 2
    ([15, 20, 35, 40, 50], 40, 20),  # rank exactly 2: no rounding up past it
    ([15, 20, 35, 40, 50], 50, 35),
    ([15, 20, 35, 40, 50], 100, 50),
    ([15, 20, 35, 40, 50], 0, 15),
    ([3, 1, 2], 50, 2),  # input order does not matter
    (list(range(1, 21)), 95, 19),  # 0.95 * 20 is exactly 19, not just above it
    ([7.5], 95, 7.5),
])
def test_percentile_is_the_nearest_rank_value(values, p, expected):
    assert percentile(values, p) == expected


def test_percentile_of_nothing_is_none_and_of_an_impossible_rank_is_an_error():
    assert percentile([], 50) is None
    with pytest.raises(ValueError):
        percentile([1.0], 101)
