"""Answers whose relay died are ended by the periodic task, keeping what was saved."""

import uuid
from datetime import timedelta

import os

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from chatapp.models import Generation, StreamClaim
from chatapp.tasks import fail_interrupted_streams, purge_expired_stream_claims
from harness import waiting
from tests import factories
from tests.celery_worker import QUEUE, celery_worker

pytestmark = pytest.mark.django_db


def streaming_generation(heartbeat_ago_s: float, **fields):
    answer = factories.message(role="assistant", status="streaming", content="partial")
    generation = factories.generation(answer, final_text="partial", **fields)
    Generation.objects.filter(pk=generation.pk).update(
        heartbeat_at=timezone.now() - timedelta(seconds=heartbeat_ago_s))
    return generation


def test_a_stream_whose_relay_stopped_beating_is_marked_failed_and_keeps_its_text(settings):
    settings.CHAT_STALE_STREAM_SECONDS = 60
    stale = streaming_generation(heartbeat_ago_s=600)
    fresh = streaming_generation(heartbeat_ago_s=1)

    ended = fail_interrupted_streams()

    stale.refresh_from_db()
    fresh.refresh_from_db()
    assert ended == 1
    assert (stale.finish_reason, stale.error_code) == ("error", "interrupted")
    assert stale.status == "failed" and stale.message.status == "failed"
    assert stale.message.content == "partial"
    assert fresh.status == "streaming" and fresh.finished_at is None


def test_a_stop_pressed_before_the_crash_still_counts(settings):
    settings.CHAT_STALE_STREAM_SECONDS = 60
    stale = streaming_generation(heartbeat_ago_s=600, status="stop_requested", cancelled_by="user",
                                 stop_seen_chars=4)

    fail_interrupted_streams()

    stale.refresh_from_db()
    assert (stale.finish_reason, stale.cancelled_by) == ("cancelled", "user")
    assert stale.status == "stopped" and stale.message.status == "stopped"
    assert stale.message.content == "part"


def test_the_claims_of_starts_that_died_are_purged_in_one_delete_though_their_users_never_return(settings):
    """A claim left by a web process that died mid-start stops counting after its lifetime, and
    was deleted only when that same user started another answer."""
    gone, returning = factories.user(), factories.user()
    long_ago = timezone.now() - StreamClaim.LIFETIME - timedelta(seconds=1)
    for user in (gone, gone, returning):
        StreamClaim.objects.create(request_id=uuid.uuid4(), user=user, claimed_at=long_ago)
    starting = StreamClaim.objects.create(request_id=uuid.uuid4(), user=returning)

    with CaptureQueriesContext(connection) as queries:
        purged = purge_expired_stream_claims()

    assert purged == 3
    assert list(StreamClaim.objects.all()) == [starting]
    assert [query["sql"].split()[0] for query in queries] == ["DELETE"]
    assert "chatapp.tasks.purge_expired_stream_claims" in {
        entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}


@pytest.mark.process
@pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="a separate worker needs the Redis broker")
@pytest.mark.django_db(transaction=True)
def test_a_celery_worker_runs_the_task_from_the_redis_broker(settings):
    stale = streaming_generation(heartbeat_ago_s=600)
    with celery_worker(CHAT_STALE_STREAM_SECONDS="60"):
        fail_interrupted_streams.apply_async(queue=QUEUE)
        waiting.wait_until(
            lambda: Generation.objects.filter(pk=stale.pk, status="failed").exists(),
            60, "the worker to end the interrupted stream",
        )

    stale.refresh_from_db()
    assert stale.error_code == "interrupted"
