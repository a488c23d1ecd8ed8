"""Daily rollups of the audit log: each past UTC day summed once into a DailyRollup row.

The staff page (chatapp/staff/audit_views.py) reads a rollup for every day that has one and the raw
rows only for the others (today, or a day not rolled up yet), so it stays fast with millions of
generations and is right even before the task first ran. A day is rolled up once it is over and
none of its answers is still streaming; rolling a day up again gives the same row (idempotent).
Rollups are kept when retention purges the rows beneath them (chatapp/staff/retention.py rolls up first).
"""

from dataclasses import fields
from datetime import UTC, date, datetime, timedelta

from django.utils import timezone

from ..models import DailyRollup
from . import selectors, services
from .audit import DayTotals, Period, totals_by_day

TOTALS_FIELDS = tuple(field.name for field in fields(DayTotals) if field.name != "day")


def roll_up_missing_days(now: datetime | None = None) -> list[date]:
    """Rolls up every ended day since the first generation that has no rollup yet; returns them."""
    today = (now or timezone.now()).astimezone(UTC).date()
    first = selectors.first_started_at()
    if first is None:
        return []
    start = first.astimezone(UTC).date()
    have = {rollup.day for rollup in selectors.rollups_of(first=start, last=today - timedelta(1))}
    days = [start + timedelta(n) for n in range((today - start).days) if start + timedelta(n) not in have]
    return [day for day in days if roll_up(day)]


def roll_up(day: date) -> DailyRollup | None:
    """Computes one day's rollup from its rows and saves it; None while an answer of it streams."""
    start, end = Period(day, day).bounds()
    if selectors.any_streaming(start=start, end=end):
        return None  # its totals would change when that answer ends: a later round rolls it up
    return services.daily_rollup_save(totals=totals_by_day(selectors.audit_rows(start=start, end=end), [day])[0])


def period_totals(period: Period, today: date) -> list[DayTotals]:
    """Each day of the period: its rollup when it has one, else computed from its raw rows."""
    rolled = {rollup.day: _totals(rollup)
              for rollup in selectors.rollups_of(first=period.start, last=min(period.end, today - timedelta(1)))}
    raw: dict[date, DayTotals] = {}
    for run in _runs([day for day in period.days if day not in rolled]):
        start, end = Period(run[0], run[-1]).bounds()
        raw.update((totals.day, totals) for totals in totals_by_day(selectors.audit_rows(start=start, end=end), run))
    return [rolled.get(day) or raw[day] for day in period.days]


def _totals(rollup: DailyRollup) -> DayTotals:
    return DayTotals(day=rollup.day, **{name: getattr(rollup, name) for name in TOTALS_FIELDS})


def _runs(days: list[date]) -> list[list[date]]:
    """Consecutive days grouped, so each run of days without a rollup costs one query."""
    runs: list[list[date]] = []
    for day in days:
        if runs and runs[-1][-1] + timedelta(1) == day:
            runs[-1].append(day)
        else:
            runs.append([day])
    return runs
