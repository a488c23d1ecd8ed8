"""Daily rollups of the audit log equal a direct computation over the raw rows, for every model
together and for each model alone, and the staff page reads them for past days (the raw rows only
for the days without one, such as today)."""

import random
from datetime import UTC, datetime, time, timedelta

import pytest
from django.db.models import Count, Q, Sum
from django.urls import reverse
from django.utils import timezone

from chatapp.models import DailyRollup, Generation
from chatapp.staff import rollups
from chatapp.tasks import purge_expired_records, roll_up_audit_days
from common.percentiles import percentile
from common.vocabulary import FinishReason
from tests import factories

pytestmark = pytest.mark.django_db

REASONS = ["stop", "stop", "stop", "length", "cancelled", "error"]
CODES = ["upstream_refused", "interrupted", ""]
MODELS = ["SmolLM2-135M-Instruct", "qwen2.5-0.5b"]


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
        **{"model": rng.choice(MODELS), **fields})
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


def direct(day, model: str = "") -> dict:
    """The day's numbers straight from the raw rows (of one model, or of all), through the
    database's own aggregates."""
    rows = Generation.objects.filter(started_at__date=day, **({"model": model} if model else {})).order_by()
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


def rolled(day, model: str = "") -> dict:
    rollup = DailyRollup.objects.get(day=day, model=model)
    return {name: getattr(rollup, name) for name in (
        "generations", "cancelled", "input_tokens", "output_tokens", "finished", "finish_reasons",
        "cancelled_by", "errors", "ttft_p50", "ttft_p95", "itl_p50", "itl_p95")}


def test_each_past_day_is_rolled_up_to_exactly_what_its_raw_rows_say(audit_log):
    rolled_up = roll_up_audit_days()

    assert rolled_up == [day.isoformat() for day in audit_log]  # not today: it is not over
    for day in audit_log:
        assert rolled(day) == direct(day), day
    assert rolled(audit_log[1])["generations"] == 0  # an empty day is rolled up too, as a gap


def test_each_past_day_is_rolled_up_per_model_too_beside_its_every_model_row(audit_log):
    roll_up_audit_days()

    for day in audit_log:
        models = set(Generation.objects.filter(started_at__date=day).values_list("model", flat=True))
        assert set(DailyRollup.objects.filter(day=day).exclude(model="").values_list("model", flat=True)) == models
        for model in models:
            assert rolled(day, model) == direct(day, model), (day, model)
    assert DailyRollup.objects.filter(day=audit_log[1]).count() == 1  # an empty day: its every-model row alone


def test_rolling_up_again_changes_nothing_and_adds_no_rows(audit_log):
    roll_up_audit_days()
    first = {day: rolled(day) for day in audit_log}

    assert roll_up_audit_days() == []  # every ended day has its rollup
    DailyRollup.objects.filter(day=audit_log[0]).delete()  # a day missed (the worker was down)
    assert roll_up_audit_days() == [audit_log[0].isoformat()]
    assert {day: rolled(day) for day in audit_log} == first
    assert DailyRollup.objects.count() == len(audit_log) + 3 * len(MODELS)  # the empty day has no model's row


def test_rolling_a_day_up_again_recomputes_each_models_row_and_drops_a_model_gone_from_it(audit_log):
    roll_up_audit_days()
    day = audit_log[0]
    Generation.objects.filter(started_at__date=day, model=MODELS[1]).update(model=MODELS[0])

    rollups.roll_up(day)

    assert rolled(day, MODELS[0]) == direct(day, MODELS[0]) == rolled(day)
    assert not DailyRollup.objects.filter(day=day, model=MODELS[1]).exists()


@pytest.mark.django_db(transaction=True)  # the API's view reads on its own thread
def test_a_late_stop_after_its_day_was_rolled_up_moves_the_days_count_as_rolling_up_again_would(client, audit_log):
    """An answer that ended for want of a reader, then its page's Stop, kept until the server was
    reachable, came after the hourly rollup: the row said `user`, the rollup `client_gone` for good."""
    day = audit_log[2]
    owner = factories.user()
    conversation = factories.conversation(owner=owner)
    answer = factories.generation(factories.message(conversation, role="assistant", content="never read"),
                                  finish_reason="cancelled", cancelled_by="client_gone", final_text="never read")
    Generation.objects.filter(pk=answer.pk).update(started_at=datetime.combine(day, time(23, 59), UTC))
    roll_up_audit_days()
    client.force_login(owner)

    stopped = client.post(reverse("api:stop", args=[answer.pk]), {"seen_chars": 5}, content_type="application/json")

    assert stopped.status_code == 202 and stopped.json()["status"] == "stopped"
    assert rolled(day) == direct(day)
    assert rolled(day, answer.model) == direct(day, answer.model)


def test_a_day_with_an_answer_still_streaming_waits_until_it_ends(audit_log):
    streaming = started(audit_log[-1], random.Random(1), finish_reason="", status="streaming")

    assert audit_log[-1].isoformat() not in roll_up_audit_days()

    Generation.objects.filter(pk=streaming.pk).update(status="completed", finish_reason="stop")
    assert roll_up_audit_days() == [audit_log[-1].isoformat()]
    assert rolled(audit_log[-1]) == direct(audit_log[-1])


@pytest.mark.parametrize("model", ["", *MODELS])
def test_the_staff_page_shows_the_same_numbers_from_rollups_as_from_raw_rows(client, audit_log, model):
    client.force_login(factories.staff_member())
    period = {"from": audit_log[0].isoformat(), "to": today().isoformat(), "model": model}
    from_raw_rows = client.get(reverse("staff-audit"), period).content

    roll_up_audit_days()

    assert client.get(reverse("staff-audit"), period).content == from_raw_rows


@pytest.mark.parametrize("model", ["", MODELS[1]])
def test_past_days_come_from_their_rollups_and_today_from_its_rows(client, audit_log, settings, model):
    client.force_login(factories.staff_member())
    roll_up_audit_days()
    settings.CHAT_RETENTION_DAYS = 2  # the two oldest days' rows go, after they were rolled up
    purge_expired_records()
    assert not Generation.objects.filter(started_at__date=audit_log[0]).exists()
    started(today(), random.Random(2), finish_reason="stop")

    page = client.get(reverse("staff-audit"), {"from": audit_log[0].isoformat(), "to": today().isoformat(),
                                               "model": model})

    expected = sum(DailyRollup.objects.filter(day__in=audit_log, model=model).values_list("generations", flat=True))
    expected += Generation.objects.filter(started_at__date=today(), **({"model": model} if model else {})).count()
    assert f"<dt>Generations</dt><dd>{expected}</dd>" in page.content.decode()


def as_rolled_up_before_models(day) -> None:
    """The day's rollup as it was before rollups were kept per model: its every-model row alone."""
    DailyRollup.objects.filter(day=day).exclude(model="").delete()
    DailyRollup.objects.filter(day=day).update(is_split_by_model=False)


def test_a_day_rolled_up_before_models_is_split_while_its_rows_are_kept_and_left_unknown_once_purged(
        client, audit_log):
    client.force_login(factories.staff_member())
    roll_up_audit_days()
    kept, purged = audit_log[2], audit_log[0]
    for day in (kept, purged):
        as_rolled_up_before_models(day)
    Generation.objects.filter(started_at__date=purged).delete()  # retention took its rows

    assert roll_up_audit_days() == [kept.isoformat()]

    assert rolled(kept, MODELS[0]) == direct(kept, MODELS[0])
    assert DailyRollup.objects.get(day=kept, model="").is_split_by_model
    assert not DailyRollup.objects.filter(day=purged).exclude(model="").exists()
    period = {"from": purged.isoformat(), "to": kept.isoformat()}
    every_model = client.get(reverse("staff-audit"), period).context
    one_model = client.get(reverse("staff-audit"), {**period, "model": MODELS[0]}).context
    assert every_model["report"].days[0].generations == rolled(purged)["generations"] > 0
    assert every_model["days_not_split"] == [purged]
    # Its model's share of that day is not known: a gap, named under the figures, never a zero.
    assert one_model["report"].days[0].generations == 0 and one_model["days_not_split"] == [purged]
    assert one_model["report"].generations == rolled(kept, MODELS[0])["generations"]


def test_the_migration_keeps_each_old_rollup_as_its_days_every_model_row(transactional_db):
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before, after = [("chatapp", "0008_conversation_settings")], [("chatapp", "0009_daily_rollup_per_model")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps.get_model("chatapp", "DailyRollup")
    figures = {"generations": 12, "cancelled": 2, "input_tokens": 300, "output_tokens": 900,
               "finish_reasons": {"stop": 10, "cancelled": 2}, "ttft_p50": 41.5, "itl_p95": 60.0}
    days = [today() - timedelta(days) for days in (3, 2)]
    for day in days:
        old.objects.create(day=day, **figures)

    executor = MigrationExecutor(connection)
    executor.migrate(after)
    migrated = executor.loader.project_state(after).apps.get_model("chatapp", "DailyRollup")
    rows = [(row.day, row.model, row.is_split_by_model, {name: getattr(row, name) for name in figures})
            for row in migrated.objects.order_by("day")]
    # Back to the newest schema: the tests after this one need its columns.
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())

    assert rows == [(day, "", False, figures) for day in days]
