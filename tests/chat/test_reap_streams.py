"""`manage.py reap_streams` (the `reaper` of `make run` without Redis) runs the periodic tasks:
it ends interrupted answers on its interval, and purges expired rows, until it is told to stop."""

import os
import signal
import subprocess

import pytest

from chatapp.models import Generation
from harness import waiting
from harness.child_process import REPO_DIR
from stack import commands
from tests import servers
from tests.chat.test_retention import generation_started
from tests.chat.test_tasks import streaming_generation

pytestmark = pytest.mark.django_db(transaction=True)


def ended(generation) -> bool:
    return Generation.objects.filter(pk=generation.pk, status="failed").exists()


@pytest.mark.process
def test_the_reaper_ends_interrupted_streams_on_every_round_purges_expired_rows_and_exits_cleanly_on_sigterm():
    first = streaming_generation(heartbeat_ago_s=600)
    expired = generation_started(days_ago=31)
    env = {**os.environ, "DATABASE_URL": servers.shared_database_url(), "DJANGO_SETTINGS_MODULE": "tests.settings",
           "CHAT_STALE_STREAM_SECONDS": "60", "CHAT_REAP_INTERVAL_SECONDS": "0.2", "CHAT_RETENTION_DAYS": "30"}
    reaper = subprocess.Popen(commands.reaper(), cwd=REPO_DIR, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        waiting.wait_until(lambda: ended(first) or reaper.poll() is not None, 60, "the first round")
        second = streaming_generation(heartbeat_ago_s=600)  # only a later round can end this one
        waiting.wait_until(lambda: ended(second) or reaper.poll() is not None, 60, "a later round")
        reaper.send_signal(signal.SIGTERM)
        status = reaper.wait(timeout=30)
    finally:
        if reaper.poll() is None:
            reaper.kill()
            reaper.wait()
    output = reaper.stdout.read().decode()

    assert ended(first) and ended(second), output
    assert status == 0, output
    assert output.count("ended 1 interrupted stream") == 2, output
    assert not Generation.objects.filter(pk=expired.pk).exists(), output
    first.refresh_from_db()
    assert first.error_code == "interrupted"
