"""Behind nginx, a Stop reaches the stream whichever web process holds it.

Two daphne processes share the channel layer on Redis; nginx balances them as `make run`
configures it (stack/nginx.py with nginx/chatapp.conf.template). Each process writes its own
access log, which tells which one served the question and which one the Stop.
"""

import json
import os
import sys
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from django.conf import settings as django_settings

from chatapp.models import Generation
from chatapp.sse import SSEParser
from stack import nginx
from tests import servers

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="processes share a channel layer only on Redis"),
]

CHUNKS = [f" word{i}" for i in range(40)]


def daphne_command(port: int, access_log: Path) -> list[str]:
    return [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
            "--access-log", str(access_log), "chatapp.asgi:application"]


def served(access_log: Path, request: str) -> bool:
    return access_log.exists() and f'"{request}"' in access_log.read_text()


def streamed_text(events) -> str:
    return "".join(json.loads(e.data)["text"] for e in events if e.event == "delta")


def test_a_stop_through_nginx_reaches_the_stream_held_by_the_other_web_process(
        user, conversation, upstream, nginx_binary, tmp_path):
    upstream.script.chunks = CHUNKS
    upstream.script.interval_s = 0.1
    env = {"DATABASE_URL": servers.shared_database_url(), "INFERENCE_URL": django_settings.INFERENCE_URL,
           "DJANGO_SETTINGS_MODULE": "tests.settings",  "DJANGO_SECRET_KEY": "shared-test-secret-" + "x" * 40}
    ports, public_port = [servers.free_port(), servers.free_port()], servers.free_port()
    logs = [tmp_path / f"web-{number}.log" for number in (1, 2)]
    site = nginx.NginxSite(listen=f"127.0.0.1:{public_port}", upstreams=tuple(f"127.0.0.1:{p}" for p in ports))
    config = nginx.render(site, tmp_path / "nginx")
    with ExitStack() as running:
        for port, log in zip(ports, logs):
            running.enter_context(servers.running(daphne_command(port, log), env=env,
                                                  ready_url=f"http://127.0.0.1:{port}/healthz"))
        running.enter_context(servers.running(nginx.command(config), ready_url=f"http://127.0.0.1:{public_port}/healthz"))
        browser = running.enter_context(httpx.Client(base_url=f"http://127.0.0.1:{public_port}", timeout=30))
        servers.sign_in(browser, user)
        token = browser.cookies["csrftoken"]
        question = f"POST /api/conversations/{conversation.pk}/messages"
        with browser.stream("POST", f"/api/conversations/{conversation.pk}/messages",
                            json={"content": "go"}, headers={"X-CSRFToken": token}) as response:
            parser, events, stop = SSEParser(), [], None
            for chunk in response.iter_raw():
                events += parser.feed(chunk)
                if stop is None and len([e for e in events if e.event == "delta"]) == 3:
                    generation_id = json.loads(events[0].data)["generation_id"]
                    stop = browser.post(f"/api/generations/{generation_id}/stop", json={"seen_chars": 12},
                                        headers={"X-CSRFToken": token})
        stop_request = f"POST /api/generations/{generation_id}/stop"
        servers.wait_until(lambda: any(served(log, question) for log in logs), 10, "the question's access log line")
    holder = next(log for log in logs if served(log, question))
    stopper = next(log for log in logs if served(log, stop_request))
    generation = Generation.objects.select_related("message").get(pk=generation_id)

    assert stop.status_code == 202
    assert stopper != holder
    assert events[-1].event == "done" and json.loads(events[-1].data)["status"] == "stopped"
    assert len(streamed_text(events)) < len("".join(CHUNKS))
    assert generation.cancelled_by == "user" and generation.message.status == "stopped"
    assert generation.message.content == "".join(CHUNKS)[:12]
    assert upstream.hung_up.wait(10)
