"""Retention purges exactly what CHAT_RETENTION_DAYS let expire, a small batch per transaction."""

import os
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from chatapp.models import Conversation, DailyRollup, Generation, Message
from chatapp.staff.retention import purge_expired
from chatapp.tasks import purge_expired_records
from harness import waiting
from tests import factories
from tests.celery_worker import QUEUE, celery_worker

pytestmark = pytest.mark.django_db


def generation_started(days_ago: float, conversation=None, **fields):
    answer = factories.message(conversation, role="assistant", content="an answer")
    fields.setdefault("finish_reason", "stop")
    generation = factories.generation(answer, final_text="an answer", **fields)
    Generation.objects.filter(pk=generation.pk).update(started_at=timezone.now() - timedelta(days=days_ago))
    return generation


def deletes_of(table: str, queries) -> int:
    return sum(query["sql"].startswith(f'DELETE FROM "{table}"') for query in queries)


def test_audit_rows_older_than_the_retention_go_in_several_batches_and_the_rest_stay(settings):
    settings.CHAT_RETENTION_DAYS = 30
    expired = [generation_started(days_ago=31 + n) for n in range(5)]
    kept = [generation_started(days_ago=29), generation_started(days_ago=0)]
    still_streaming = generation_started(days_ago=40, finish_reason="", status="streaming")

    with CaptureQueriesContext(connection) as queries:
        purged = purge_expired(batch_size=2)

    assert purged.generations == 5
    assert deletes_of("chatapp_generation", queries.captured_queries) == 3  # 2 + 2 + 1
    remaining = set(Generation.objects.values_list("pk", flat=True))
    assert remaining == {row.pk for row in [*kept, still_streaming]}
    # The answers the user keeps in their conversations are theirs: only the audit copies went.
    assert all(Message.objects.filter(pk=row.message_id).exists() for row in expired)


def test_conversations_deleted_before_the_cutoff_go_with_their_messages_once_their_audit_rows_are_gone(settings):
    settings.CHAT_RETENTION_DAYS = 30
    long_deleted = factories.conversation(deleted_at=timezone.now() - timedelta(days=60))
    generation_started(days_ago=61, conversation=long_deleted)
    factories.message(long_deleted, content="a question")
    lately_deleted = factories.conversation(deleted_at=timezone.now() - timedelta(days=2))
    generation_started(days_ago=50, conversation=lately_deleted)
    kept_old = factories.conversation()
    generation_started(days_ago=90, conversation=kept_old)

    purged = purge_expired(batch_size=1)

    assert (purged.generations, purged.conversations, purged.messages) == (3, 1, 2)
    assert set(Conversation.objects.values_list("pk", flat=True)) == {lately_deleted.pk, kept_old.pk}
    assert not Message.objects.filter(conversation_id=long_deleted.pk).exists()
    assert Message.objects.filter(conversation=kept_old).count() == 1


def test_without_a_retention_period_nothing_is_ever_purged(settings):
    settings.CHAT_RETENTION_DAYS = 0
    # Older than any retention anyone sets; not ten years, each of whose days is rolled up first.
    old = generation_started(days_ago=400)
    factories.conversation(deleted_at=timezone.now() - timedelta(days=400))

    assert purge_expired_records() == {"generations": 0, "conversations": 0, "messages": 0}
    assert Generation.objects.filter(pk=old.pk).exists()
    assert Conversation.objects.filter(deleted_at__isnull=False).exists()


def test_the_periodic_schedule_runs_the_purge(settings):
    assert {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()} >= {
        "chatapp.tasks.purge_expired_records", "chatapp.tasks.fail_interrupted_streams"}


@pytest.mark.process
@pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="a separate worker needs the Redis broker")
@pytest.mark.django_db(transaction=True)
def test_a_celery_worker_rolls_the_expired_days_up_then_purges_their_rows():
    expired = generation_started(days_ago=31)
    expired_day = Generation.objects.get(pk=expired.pk).started_at.date()
    kept = generation_started(days_ago=1)

    with celery_worker(CHAT_RETENTION_DAYS="30"):
        purge_expired_records.apply_async(queue=QUEUE)
        waiting.wait_until(lambda: not Generation.objects.filter(pk=expired.pk).exists(), 60,
                           "the worker to purge the expired row")

    assert Generation.objects.filter(pk=kept.pk).exists()
    assert DailyRollup.objects.get(day=expired_day, model=DailyRollup.ALL_MODELS).generations == 1
