"""Daily rollups of the audit log: each past UTC day summed once into DailyRollup rows, one for
every model together and one for each model its answers came from.

The staff page (chatapp/staff/audit_views.py) reads a rollup for every day that has one and the raw
rows only for the others (today, or a day not rolled up yet), so it stays fast with millions of
generations and is right even before the task first ran. A day is rolled up once it is over and
none of its answers is still streaming; rolling a day up again gives the same rows (idempotent).
Rollups are kept when retention purges the rows beneath them (chatapp/staff/retention.py rolls up first).

A day rolled up before rollups were kept per model has its every-model row alone (migration
0009): the task adds its per-model rows while all of the day's rows are kept, and the page shows
each model's share of a day whose rows were purged as unknown (`days_not_split`), never as zero.
"""

from collections import Counter
from dataclasses import dataclass, fields
from datetime import UTC, date, datetime, timedelta

from django.utils import timezone

from ..models import DailyRollup
from . import selectors, services
from .audit import DayTotals, Period, model_of, totals_by_day, totals_by_model

ALL_MODELS = DailyRollup.ALL_MODELS
TOTALS_FIELDS = tuple(field.name for field in fields(DayTotals) if field.name != "day")


@dataclass(frozen=True)
class PeriodTotals:
    days: list[DayTotals]  # each day of the period, of the model asked for (or of every model)
    models: list[tuple[str, int]]  # each model seen in the period, with its generations, most first
    days_not_split: list[date]  # rolled up before rollups were kept per model, rows since purged


def roll_up_missing_days(now: datetime | None = None) -> list[date]:
    """Rolls up every ended day since the first generation that has no rollup yet, or whose
    rollup is not split by model while all its rows are kept; returns them."""
    today = (now or timezone.now()).astimezone(UTC).date()
    first = selectors.first_started_at()
    if first is None:
        return []
    start = first.astimezone(UTC).date()
    have = {rollup.day: rollup for rollup in selectors.rollups_of(first=start, last=today - timedelta(1),
                                                                  model=ALL_MODELS)}
    days = [start + timedelta(n) for n in range((today - start).days)]
    return [day for day in days if (day not in have or _can_split(have[day])) and roll_up(day)]


def _can_split(rollup: DailyRollup) -> bool:
    """Whether a day rolled up before rollups were kept per model still has every row it summed
    (retention purges oldest first, so only the day at its cutoff may have lost some)."""
    if rollup.is_split_by_model:
        return False
    start, end = Period(rollup.day, rollup.day).bounds()
    return selectors.generations_started(start=start, end=end) == rollup.generations


def roll_up(day: date) -> DailyRollup | None:
    """Computes one day's rollups from its rows and saves them; returns its every-model row, or
    None while an answer of the day streams."""
    start, end = Period(day, day).bounds()
    if selectors.any_streaming(start=start, end=end):
        return None  # its totals would change when that answer ends: a later round rolls it up
    rows = selectors.audit_rows(start=start, end=end)
    return services.daily_rollups_save(totals=totals_by_day(rows, [day])[0],
                                       totals_by_model=totals_by_model(rows, day))


def period_totals(period: Period, today: date, model: str = ALL_MODELS) -> PeriodTotals:
    """Each day of the period, of `model` or of every model: its rollup when it has one, else
    computed from its raw rows; and the models seen in the period."""
    rollups = selectors.rollups_of(first=period.start, last=min(period.end, today - timedelta(1)))
    every_model = {rollup.day: rollup for rollup in rollups if rollup.model == ALL_MODELS}
    of_model = {rollup.day: _totals(rollup) for rollup in rollups if rollup.model == model}
    seen = Counter()
    for rollup in rollups:
        if rollup.model != ALL_MODELS:
            seen[rollup.model] += rollup.generations
    raw: dict[date, DayTotals] = {}
    for run in _runs([day for day in period.days if day not in every_model]):
        start, end = Period(run[0], run[-1]).bounds()
        rows = selectors.audit_rows(start=start, end=end)
        seen.update(model_of(row) for row in rows)
        rows = rows if model == ALL_MODELS else [row for row in rows if model_of(row) == model]
        raw.update((totals.day, totals) for totals in totals_by_day(rows, run))
    # A rolled-up day without a row of the model had none of its answers (or is not split).
    days = [(of_model.get(day) or DayTotals(day)) if day in every_model else raw[day] for day in period.days]
    return PeriodTotals(
        days=days,
        models=sorted(seen.items(), key=lambda item: (-item[1], item[0])),
        days_not_split=sorted(day for day, rollup in every_model.items() if not rollup.is_split_by_model),
    )


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
