"""An answer whose web process is gone is ended within seconds, its heartbeat still fresh; an
answer whose process is there lives on, even when its key was lost with Redis for a moment."""

import os
import uuid
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.utils import timezone

from chatapp.models import Generation
from chatapp.runtime import web_process
from chatapp.tasks import fail_interrupted_streams
from harness import waiting
from tests import factories

pytestmark = [pytest.mark.django_db,
              pytest.mark.skipif(not os.environ.get("REDIS_URL"),
                                 reason="web processes see each other's presence only on Redis")]



@pytest.fixture(autouse=True)
def short_lived_keys(settings):
    settings.CHAT_WEB_PROCESS_TTL_SECONDS = 1
    settings.CHAT_STALE_STREAM_SECONDS = 600  # no answer here ends for its heartbeat


def live_answer(relay_process: str) -> Generation:
    answer = factories.message(role="assistant", status="streaming", content="partial")
    return factories.generation(answer, final_text="partial", relay_process=relay_process)


def test_an_answer_whose_web_process_is_gone_ends_interrupted_with_its_text_though_its_heartbeat_is_fresh():
    orphaned = live_answer(relay_process=uuid.uuid4().hex)  # a process that never wrote its key

    assert fail_interrupted_streams() == 0  # missing once: perhaps Redis lost its keys
    waiting.wait_until(lambda: fail_interrupted_streams() == 1, 10, "the process taken for gone")

    orphaned.refresh_from_db()
    assert (orphaned.status, orphaned.finish_reason, orphaned.error_code) == ("failed", "error", "interrupted")
    assert orphaned.message.status == "failed" and orphaned.message.content == "partial"


def test_an_answer_whose_web_process_lost_its_key_for_a_moment_lives_on():
    web_process.announce()
    relayed_here = live_answer(relay_process=web_process.relay_process())
    unknown = live_answer(relay_process="")  # a relay that named no process: its heartbeat decides
    here = f"chatapp:web-process:{web_process.ID}"
    cache.delete(here)  # as a Redis restarted without persistence loses it

    assert fail_interrupted_streams() == 0
    waiting.wait_until(lambda: cache.get(here) is not None, 10, "the process's key written again")
    assert fail_interrupted_streams() == 0

    relayed_here.refresh_from_db()
    unknown.refresh_from_db()
    assert relayed_here.status == unknown.status == "streaming"


def test_an_answer_whose_relay_still_runs_lives_on_though_the_database_refused_its_beats(settings):
    settings.CHAT_STALE_STREAM_SECONDS = 60
    web_process.announce()
    running, ended = (live_answer(relay_process=web_process.relay_process()) for _ in range(2))
    Generation.objects.filter(pk__in=[running.pk, ended.pk]).update(  # no beat for ten minutes
        heartbeat_at=timezone.now() - timedelta(seconds=600))
    web_process.relay_began(running.pk)
    try:
        waiting.wait_until(lambda: running.pk in web_process.relays_running({web_process.ID}), 10,
                           "the process's key listing the relay")
        reaped = fail_interrupted_streams()
    finally:
        web_process.relay_ended(running.pk)

    running.refresh_from_db()
    ended.refresh_from_db()
    assert reaped == 1
    assert running.status == "streaming"
    assert (ended.status, ended.error_code) == ("failed", "interrupted")
