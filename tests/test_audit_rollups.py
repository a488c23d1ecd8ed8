"""Daily rollups of the audit log equal a direct computation over the raw rows, and the staff
page reads them for past days (the raw rows only for the days without one, such as today)."""

import random
from datetime import UTC, datetime, time, timedelta

import pytest
from django.db.models import Count, Q, Sum
from django.urls import reverse
from django.utils import timezone

from chatapp.models import DailyRollup, Generation
from chatapp.tasks import purge_expired_records, roll_up_audit_days
from common.percentiles import percentile
from common.vocabulary import FinishReason
from tests import factories

pytestmark = pytest.mark.django_db

REASONS = ["stop", "stop", "stop", "length", "cancelled", "error"]
CODES = ["upstream_refused", "interrupted", ""]


def today():
    return timezone.now().astimezone(UTC).date()


def started(day, rng: random.Random, **fields) -> Generation:
    at = datetime.combine(day, time.min, UTC) + timedelta(seconds=rng.randrange(86400))
    reason = fields.pop("finish_reason", rng.choice(REASONS))
    generation = factories.generation(
        finish_reason=reason, cancelled_by=rng.choice(["user", "client_gone"]) if reason == "cancelled" else "",
        error_code=rng.choice(CODES) if reason == "error" else "",
        input_tokens=rng.randrange(1, 500), output_tokens=rng.choice([None, rng.randrange(0, 500)]),
        ttft_ms=rng.choice([None, rng.uniform(5, 900)]), itl_mean_ms=rng.choice([None, rng.uniform(1, 60)]),
        **fields)
    Generation.objects.filter(pk=generation.pk).update(
        started_at=at, finished_at=at + timedelta(milliseconds=rng.uniform(10, 20000)) if reason else None)
    return generation


@pytest.fixture
def audit_log():
    """Four past days of varied generations (one day empty), and a few today."""
    rng = random.Random(15)
    past = [today() - timedelta(days) for days in (4, 3, 2, 1)]
    for day in past:
        if day != past[1]:
            for _ in range(rng.randrange(20, 40)):
                started(day, rng)
    for _ in range(3):
        started(today(), rng)
    return past


def direct(day) -> dict:
    """The day's numbers straight from the raw rows, through the database's own aggregates."""
    rows = Generation.objects.filter(started_at__date=day).order_by()
    numbers = rows.aggregate(generations=Count("pk"), cancelled=Count("pk", filter=Q(finish_reason="cancelled")),
                             input_tokens=Sum("input_tokens", default=0), output_tokens=Sum("output_tokens", default=0),
                             finished=Count("finished_at"))
    numbers["finish_reasons"] = dict(rows.values_list("finish_reason").annotate(n=Count("pk")))
    numbers["cancelled_by"] = dict(rows.filter(finish_reason=FinishReason.CANCELLED)
                                   .values_list("cancelled_by").annotate(n=Count("pk")))
    numbers["errors"] = {code or "(no code)": n for code, n in rows.filter(finish_reason=FinishReason.ERROR)
                         .values_list("error_code").annotate(n=Count("pk"))}
    for name, column in (("ttft", "ttft_ms"), ("itl", "itl_mean_ms")):
        values = list(rows.exclude(**{f"{column}__isnull": True}).values_list(column, flat=True))
        numbers[f"{name}_p50"], numbers[f"{name}_p95"] = percentile(values, 50), percentile(values, 95)
    return numbers


def rolled(day) -> dict:
    rollup = DailyRollup.objects.get(day=day)
    return {name: getattr(rollup, name) for name in (
        "generations", "cancelled", "input_tokens", "output_tokens", "finished", "finish_reasons",
        "cancelled_by", "errors", "ttft_p50", "ttft_p95", "itl_p50", "itl_p95")}


def test_each_past_day_is_rolled_up_to_exactly_what_its_raw_rows_say(audit_log):
    rolled_up = roll_up_audit_days()

    assert rolled_up == [day.isoformat() for day in audit_log]  # not today: it is not over
    for day in audit_log:
        assert rolled(day) == direct(day), day
    assert rolled(audit_log[1])["generations"] == 0  # an empty day is rolled up too, as a gap


def test_rolling_up_again_changes_nothing_and_adds_no_rows(audit_log):
    roll_up_audit_days()
    first = {day: rolled(day) for day in audit_log}

    assert roll_up_audit_days() == []  # every ended day has its rollup
    DailyRollup.objects.filter(day=audit_log[0]).delete()  # a day missed (the worker was down)
    assert roll_up_audit_days() == [audit_log[0].isoformat()]
    assert {day: rolled(day) for day in audit_log} == first
    assert DailyRollup.objects.count() == len(audit_log)


def test_a_day_with_an_answer_still_streaming_waits_until_it_ends(audit_log):
    streaming = started(audit_log[-1], random.Random(1), finish_reason="", status="streaming")

    assert audit_log[-1].isoformat() not in roll_up_audit_days()

    Generation.objects.filter(pk=streaming.pk).update(status="completed", finish_reason="stop")
    assert roll_up_audit_days() == [audit_log[-1].isoformat()]
    assert rolled(audit_log[-1]) == direct(audit_log[-1])


def test_the_staff_page_shows_the_same_numbers_from_rollups_as_from_raw_rows(client, audit_log):
    client.force_login(factories.user(is_staff=True))
    period = {"from": audit_log[0].isoformat(), "to": today().isoformat()}
    from_raw_rows = client.get(reverse("staff-audit"), period).content

    roll_up_audit_days()

    assert client.get(reverse("staff-audit"), period).content == from_raw_rows


def test_past_days_come_from_their_rollups_and_today_from_its_rows(client, audit_log, settings):
    client.force_login(factories.user(is_staff=True))
    roll_up_audit_days()
    settings.CHAT_RETENTION_DAYS = 2  # the two oldest days' rows go, after they were rolled up
    purge_expired_records()
    assert not Generation.objects.filter(started_at__date=audit_log[0]).exists()
    started(today(), random.Random(2), finish_reason="stop")

    page = client.get(reverse("staff-audit"), {"from": audit_log[0].isoformat(), "to": today().isoformat()})

    expected = sum(rolled(day)["generations"] for day in audit_log) + Generation.objects.filter(
        started_at__date=today()).count()
    assert f"<dt>Generations</dt><dd>{expected}</dd>" in page.content.decode()
