"""The one percentile of the project: the staff charts, the daily rollups, the benchmarks and the
reliability suites all read their p50/p95/p99 from here.

Nearest rank, not interpolation: every figure is a value that was observed (a p99 TTFT is one
request's TTFT, which a reader can find in the rows), the audit charts and rollups have always
shown it, and with the hundreds of samples a benchmark level holds the two differ by less than
the run-to-run noise.
"""

import math


def percentile(values: list[float], p: int) -> float | None:
    """Nearest-rank percentile: the smallest value with at least p% of the values <= it.

    That is the ceil(p/100 * n)-th smallest value (1-based), so the result is always an
    observed value. `p` is an integer so that p * n / 100 is exact in floating point.
    """
    if not 0 <= p <= 100:
        raise ValueError(f"percentile must be within 0..100, not {p}")
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p * len(ordered) / 100))
    return ordered[rank - 1]
