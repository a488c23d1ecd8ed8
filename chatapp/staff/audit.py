"""The numbers behind the staff audit page: period parsing, per-day totals, percentiles.

A day's totals come from its raw rows (fetched with `.values_list`) or from its rollup
(chatapp/staff/rollups.py, which computes them with the same code); rows are aggregated in Python, so the same code runs on
SQLite and PostgreSQL (no database-specific percentile or date-truncation functions).
"""

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta

from common.percentiles import percentile
from common.vocabulary import FinishReason

DEFAULT_DAYS = 14
# Bounds the rows fetched and the chart's x-axis; a year is plenty for a review page.
MAX_DAYS = 366
IN_PROGRESS = "in progress"  # label for rows whose finish_reason is still '' (streaming)
NO_CODE = "(no code)"
NO_MODEL = "(no model)"  # a row naming none; "" is every model's rollup (DailyRollup.ALL_MODELS)

FIELDS = (
    "started_at", "finished_at", "finish_reason", "cancelled_by", "error_code",
    "ttft_ms", "itl_mean_ms", "input_tokens", "output_tokens", "model",
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
    try:
        start = _parse_date("from", from_text) if from_text else end - timedelta(DEFAULT_DAYS - 1)
        end + timedelta(1)  # the period's bounds end the next midnight
    except OverflowError:
        raise BadPeriod("The period reaches past the calendar (years 1 to 9999).") from None
    if start > end:
        raise BadPeriod(f"'from' ({start}) is after 'to' ({end}).")
    if (end - start).days + 1 > MAX_DAYS:
        raise BadPeriod(f"The period is longer than {MAX_DAYS} days; choose a shorter one.")
    return Period(start, end)


@dataclass(frozen=True)
class DayTotals:
    """One UTC day of the audit log, summed so that days add up to a period (a DailyRollup row).

    Counts and sums add across days; the latency percentiles are the day's own, as charted.
    """

    day: date
    generations: int = 0
    cancelled: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    finished: int = 0  # rows with a finished_at: what the mean duration is over
    duration_ms_sum: float = 0.0
    finish_reasons: dict[str, int] = field(default_factory=dict)
    cancelled_by: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    ttft_p50: float | None = None
    ttft_p95: float | None = None
    itl_p50: float | None = None
    itl_p95: float | None = None

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
    days: list[DayTotals]


def totals_by_day(rows: list[tuple], days: list[date]) -> list[DayTotals]:
    """Rows shaped like FIELDS, each counted on the UTC calendar day of its started_at."""
    by_day: dict[date, list[dict]] = {day: [] for day in days}
    for row in rows:
        by_day[row[0].astimezone(UTC).date()].append(dict(zip(FIELDS, row)))
    return [day_totals(day, by_day[day]) for day in days]


def model_of(row: tuple) -> str:
    """The model of a row shaped like FIELDS."""
    return row[-1] or NO_MODEL


def totals_by_model(rows: list[tuple], day: date) -> dict[str, DayTotals]:
    """One day's rows shaped like FIELDS, summed for each model they came from."""
    by_model: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_model[model_of(row)].append(dict(zip(FIELDS, row)))
    return {model: day_totals(day, model_rows) for model, model_rows in sorted(by_model.items())}


def day_totals(day: date, rows: list[dict]) -> DayTotals:
    cancelled = [row for row in rows if row["finish_reason"] == FinishReason.CANCELLED]
    # A row carries an error when it finished with one or when some code recorded one anyway.
    errors = Counter(row["error_code"] or NO_CODE for row in rows
                     if row["finish_reason"] == FinishReason.ERROR or row["error_code"])
    durations = [(row["finished_at"] - row["started_at"]).total_seconds() * 1000
                 for row in rows if row["finished_at"] is not None]
    ttft = [row["ttft_ms"] for row in rows if row["ttft_ms"] is not None]
    itl = [row["itl_mean_ms"] for row in rows if row["itl_mean_ms"] is not None]
    return DayTotals(
        day=day,
        generations=len(rows),
        cancelled=len(cancelled),
        input_tokens=sum(row["input_tokens"] or 0 for row in rows),
        output_tokens=sum(row["output_tokens"] or 0 for row in rows),
        finished=len(durations),
        duration_ms_sum=sum(durations),
        finish_reasons=dict(Counter(row["finish_reason"] or IN_PROGRESS for row in rows)),
        cancelled_by=dict(Counter(row["cancelled_by"] or "(unknown)" for row in cancelled)),
        errors=dict(errors),
        ttft_p50=percentile(ttft, 50),
        ttft_p95=percentile(ttft, 95),
        itl_p50=percentile(itl, 50),
        itl_p95=percentile(itl, 95),
    )


def build_report(period: Period, days: list[DayTotals]) -> Report:
    """The period's numbers from its days' totals (rolled up or computed from raw rows alike)."""
    reasons, cancelled_by, errors = Counter(), Counter(), Counter()
    for day in days:
        reasons.update(day.finish_reasons)
        cancelled_by.update(day.cancelled_by)
        errors.update(day.errors)
    reason_order = [str(reason) for reason in FinishReason] + [IN_PROGRESS]
    # A value outside the vocabulary (an older or newer writer) is shown, not silently dropped.
    reason_order += sorted(set(reasons) - set(reason_order))
    finished = sum(day.finished for day in days)
    return Report(
        period=period,
        generations=sum(day.generations for day in days),
        input_tokens=sum(day.input_tokens for day in days),
        output_tokens=sum(day.output_tokens for day in days),
        mean_duration_ms=sum(day.duration_ms_sum for day in days) / finished if finished else None,
        finish_reasons=[(reason, reasons[reason]) for reason in reason_order],
        cancelled_by=_most_common(cancelled_by),
        errors=_most_common(errors),
        days=days,
    )


def _most_common(counts: Counter) -> list[tuple[str, int]]:
    """Most frequent first; ties by name, so rolled-up and raw days list them alike."""
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))

