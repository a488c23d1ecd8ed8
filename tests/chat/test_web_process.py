"""An answer whose web process is gone is ended within seconds, its heartbeat still fresh; an
answer whose process is there lives on, even when its key was lost with Redis for a moment, or
when it belongs to another stack of the checkout on the same SQLite file, without Redis."""

import os
import uuid
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.utils import timezone

from chatapp.models import Generation
from chatapp.runtime import presence_file, web_process
from chatapp.tasks import fail_interrupted_streams
from harness import waiting
from tests import factories

pytestmark = pytest.mark.django_db
on_redis = pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="the keys of the web processes are in Redis")


@pytest.fixture(autouse=True)
def short_lived_keys(settings):
    settings.CHAT_WEB_PROCESS_TTL_SECONDS = 1
    settings.CHAT_STALE_STREAM_SECONDS = 600  # no answer here ends for its heartbeat


def live_answer(relay_process: str) -> Generation:
    answer = factories.message(role="assistant", status="streaming", content="partial")
    return factories.generation(answer, final_text="partial", relay_process=relay_process)


@on_redis
def test_an_answer_whose_web_process_is_gone_ends_interrupted_with_its_text_though_its_heartbeat_is_fresh():
    orphaned = live_answer(relay_process=uuid.uuid4().hex)  # a process that never wrote its key

    assert fail_interrupted_streams() == 0  # missing once: perhaps Redis lost its keys
    waiting.wait_until(lambda: fail_interrupted_streams() == 1, 10, "the process taken for gone")

    orphaned.refresh_from_db()
    assert (orphaned.status, orphaned.finish_reason, orphaned.error_code) == ("failed", "error", "interrupted")
    assert orphaned.message.status == "failed" and orphaned.message.content == "partial"


@on_redis
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


@on_redis
def test_an_answer_whose_relay_still_runs_lives_on_though_the_database_refused_its_beats(settings):
    settings.CHAT_STALE_STREAM_SECONDS = 60
    web_process.announce()
    running, ended = (live_answer(relay_process=web_process.relay_process()) for _ in range(2))
    Generation.objects.filter(pk__in=[running.pk, ended.pk]).update(  # no beat for ten minutes
        heartbeat_at=timezone.now() - timedelta(seconds=600))
    web_process.relay_began(running.pk, on_shutdown=lambda: None)
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


@pytest.fixture
def without_redis(settings, tmp_path):
    """`make run`'s default: no Redis, each web process's presence a file of the checkout."""
    settings.REDIS_URL = ""
    settings.CHAT_WEB_PROCESS_DIR = tmp_path
    return tmp_path


def test_without_redis_a_web_process_starting_leaves_the_answer_of_another_stacks_live_process_alone(without_redis):
    """Two stacks of one checkout on one SQLite file: the second one's web process, as it starts,
    had ended the first one's answer mid-stream, taking every other web process for gone."""
    other_stack = presence_file.PresenceFile(without_redis, uuid.uuid4().hex)  # a lock, as its process holds it
    relayed_there = live_answer(relay_process=other_stack.process_id)
    web_process.announce()

    assert fail_interrupted_streams() == 0  # what a web process runs as it starts (chatapp/asgi.py)

    relayed_there.refresh_from_db()
    assert relayed_there.status == "streaming"
    other_stack.release()


def test_without_redis_an_answer_whose_web_process_died_ends_at_once(without_redis):
    # The kernel lets go of a dead process's lock; closing the file is the same event to flock(2).
    dead = presence_file.PresenceFile(without_redis, uuid.uuid4().hex)
    orphaned = live_answer(relay_process=dead.process_id)
    dead.close()

    assert fail_interrupted_streams() == 1

    orphaned.refresh_from_db()
    assert (orphaned.status, orphaned.error_code) == ("failed", "interrupted")


def test_without_redis_an_answer_whose_web_process_left_no_file_here_is_left_to_its_heartbeat(without_redis):
    elsewhere = live_answer(relay_process=uuid.uuid4().hex)  # another machine's, or another checkout's

    assert fail_interrupted_streams() == 0

    elsewhere.refresh_from_db()
    assert elsewhere.status == "streaming"


def test_without_redis_the_file_of_a_gone_process_is_removed_once_no_live_answer_names_it(without_redis):
    named, unnamed = (presence_file.PresenceFile(without_redis, uuid.uuid4().hex) for _ in range(2))
    live_answer(relay_process=named.process_id)
    alive = presence_file.PresenceFile(without_redis, uuid.uuid4().hex)
    named.close()
    unnamed.close()

    fail_interrupted_streams()
    assert sorted(path.name for path in without_redis.iterdir()) == sorted([named.process_id, alive.process_id])
    fail_interrupted_streams()
    assert [path.name for path in without_redis.iterdir()] == [alive.process_id]
    alive.release()
