"""Daily rollups of the audit log: each past UTC day summed once into a DailyRollup row.

The staff page (chatapp/staff/audit_views.py) reads a rollup for every day that has one and the raw
rows only for the others (today, or a day not rolled up yet), so it stays fast with millions of
generations and is right even before the task first ran. A day is rolled up once it is over and
none of its answers is still streaming; rolling a day up again gives the same row (idempotent).
Rollups are kept when retention purges the rows beneath them (chatapp/staff/retention.py rolls up first).
"""

from dataclasses import asdict, fields
from datetime import UTC, date, datetime, timedelta

from django.db.models import Min
from django.utils import timezone

from ..models import DailyRollup, Generation
from .audit import FIELDS, DayTotals, Period, totals_by_day

TOTALS_FIELDS = tuple(field.name for field in fields(DayTotals) if field.name != "day")


def roll_up_missing_days(now: datetime | None = None) -> list[date]:
    """Rolls up every ended day since the first generation that has no rollup yet; returns them."""
    today = (now or timezone.now()).astimezone(UTC).date()
    first = Generation.objects.aggregate(first=Min("started_at"))["first"]
    if first is None:
        return []
    start = first.astimezone(UTC).date()
    have = set(DailyRollup.objects.filter(day__gte=start, day__lt=today).values_list("day", flat=True))
    days = [start + timedelta(n) for n in range((today - start).days) if start + timedelta(n) not in have]
    return [day for day in days if roll_up(day)]


def roll_up(day: date) -> DailyRollup | None:
    """Computes one day's rollup from its rows and saves it; None while an answer of it streams."""
    start, end = Period(day, day).bounds()
    rows = Generation.objects.filter(started_at__gte=start, started_at__lt=end).order_by()
    if rows.filter(status__in=Generation.LIVE_STATUSES).exists():
        return None  # its totals would change when that answer ends: a later round rolls it up
    totals = totals_by_day(list(rows.values_list(*FIELDS)), [day])[0]
    values = {name: value for name, value in asdict(totals).items() if name != "day"}
    rollup, _ = DailyRollup.objects.update_or_create(day=day, defaults=values)
    return rollup


def period_totals(period: Period, today: date) -> list[DayTotals]:
    """Each day of the period: its rollup when it has one, else computed from its raw rows."""
    rolled = {rollup.day: _totals(rollup)
              for rollup in DailyRollup.objects.filter(day__gte=period.start, day__lte=period.end, day__lt=today)}
    raw: dict[date, DayTotals] = {}
    for run in _runs([day for day in period.days if day not in rolled]):
        start, end = Period(run[0], run[-1]).bounds()
        rows = Generation.objects.filter(started_at__gte=start, started_at__lt=end).order_by().values_list(*FIELDS)
        raw.update((totals.day, totals) for totals in totals_by_day(list(rows), run))
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
