"""The numbers behind the staff audit page: period parsing, per-day aggregation, percentiles.

Rows are fetched with `.values_list` and aggregated in Python, so the same code runs on
SQLite and PostgreSQL (no database-specific percentile or date-truncation functions).
"""

import math
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from common.vocabulary import FinishReason

from .models import Generation

DEFAULT_DAYS = 14
# Bounds the rows fetched and the chart's x-axis; a year is plenty for a review page.
MAX_DAYS = 366
IN_PROGRESS = "in progress"  # label for rows whose finish_reason is still '' (streaming)
NO_CODE = "(no code)"

FIELDS = (
    "started_at", "finished_at", "finish_reason", "cancelled_by", "error_code",
    "ttft_ms", "itl_mean_ms", "input_tokens", "output_tokens",
)


class BadPeriod(ValueError):
    """The requested period cannot be used; the message is shown to the user."""


@dataclass(frozen=True)
class Period:
    start: date  # inclusive
    end: date  # inclusive

    @property
    def days(self) -> list[date]:
        return [self.start + timedelta(n) for n in range((self.end - self.start).days + 1)]

    def bounds(self) -> tuple[datetime, datetime]:
        """UTC [start, end) datetimes covering every day of the period."""
        return (datetime.combine(self.start, time.min, UTC),
                datetime.combine(self.end + timedelta(1), time.min, UTC))


def _parse_date(name: str, text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise BadPeriod(f"'{name}' must be a date written YYYY-MM-DD, not {text!r}.") from None


def parse_period(from_text: str | None, to_text: str | None, today: date) -> Period:
    """Both ends inclusive; a missing end defaults to the 14 days ending `today`."""
    end = _parse_date("to", to_text) if to_text else today
    start = _parse_date("from", from_text) if from_text else end - timedelta(DEFAULT_DAYS - 1)
    if start > end:
        raise BadPeriod(f"'from' ({start}) is after 'to' ({end}).")
    if (end - start).days + 1 > MAX_DAYS:
        raise BadPeriod(f"The period is longer than {MAX_DAYS} days; choose a shorter one.")
    return Period(start, end)


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


def fetch_rows(period: Period) -> list[tuple]:
    start, end = period.bounds()
    return list(Generation.objects.filter(started_at__gte=start, started_at__lt=end)
                .order_by().values_list(*FIELDS))


@dataclass(frozen=True)
class Day:
    day: date
    generations: int
    cancelled: int
    ttft_p50: float | None
    ttft_p95: float | None
    itl_p50: float | None
    itl_p95: float | None

    @property
    def cancel_rate(self) -> float | None:
        """None on a day without generations: a gap, not a 0% day."""
        return self.cancelled / self.generations if self.generations else None


@dataclass(frozen=True)
class Report:
    period: Period
    generations: int
    input_tokens: int
    output_tokens: int
    mean_duration_ms: float | None
    finish_reasons: list[tuple[str, int]]  # every reason, zero counts included, fixed order
    cancelled_by: list[tuple[str, int]]  # most frequent first
    errors: list[tuple[str, int]]  # most frequent first
    days: list[Day]


def summarize(rows: list[tuple], period: Period) -> Report:
    """Aggregate rows shaped like FIELDS; days are UTC calendar days of started_at."""
    rows = [dict(zip(FIELDS, row)) for row in rows]
    by_day: dict[date, list[dict]] = {day: [] for day in period.days}
    for row in rows:
        by_day[row["started_at"].astimezone(UTC).date()].append(row)

    reasons = Counter(row["finish_reason"] or IN_PROGRESS for row in rows)
    reason_order = [str(reason) for reason in FinishReason] + [IN_PROGRESS]
    # A value outside the vocabulary (an older or newer writer) is shown, not silently dropped.
    reason_order += sorted(set(reasons) - set(reason_order))
    cancelled = [row for row in rows if row["finish_reason"] == FinishReason.CANCELLED]
    # A row carries an error when it finished with one or when some code recorded one anyway.
    errors = Counter(row["error_code"] or NO_CODE for row in rows
                     if row["finish_reason"] == FinishReason.ERROR or row["error_code"])
    durations = [(row["finished_at"] - row["started_at"]).total_seconds() * 1000
                 for row in rows if row["finished_at"] is not None]
    return Report(
        period=period,
        generations=len(rows),
        input_tokens=sum(row["input_tokens"] or 0 for row in rows),
        output_tokens=sum(row["output_tokens"] or 0 for row in rows),
        mean_duration_ms=sum(durations) / len(durations) if durations else None,
        finish_reasons=[(reason, reasons[reason]) for reason in reason_order],
        cancelled_by=Counter(row["cancelled_by"] or "(unknown)" for row in cancelled).most_common(),
        errors=errors.most_common(),
        days=[_day(day, by_day[day]) for day in period.days],
    )


def _day(day: date, rows: list[dict]) -> Day:
    ttft = [row["ttft_ms"] for row in rows if row["ttft_ms"] is not None]
    itl = [row["itl_mean_ms"] for row in rows if row["itl_mean_ms"] is not None]
    return Day(
        day=day,
        generations=len(rows),
        cancelled=sum(row["finish_reason"] == FinishReason.CANCELLED for row in rows),
        ttft_p50=percentile(ttft, 50),
        ttft_p95=percentile(ttft, 95),
        itl_p50=percentile(itl, 50),
        itl_p95=percentile(itl, 95),
    )
