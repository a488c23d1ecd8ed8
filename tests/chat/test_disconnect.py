"""A browser that leaves mid-answer: the upstream is closed at once and what it saw is kept."""

import asyncio
import json

import pytest
from asgiref.sync import sync_to_async
from asgiref.testing import ApplicationCommunicator
from django.conf import settings as django_settings

from chatapp.asgi import application
from chatapp.models import Generation, Message
from chatapp.sse import SSEParser

pytestmark = pytest.mark.django_db(transaction=True)
CSRF_TOKEN = "a" * 32


def scope_for(path: str, session_key: str) -> dict:
    cookies = f"{django_settings.SESSION_COOKIE_NAME}={session_key}; csrftoken={CSRF_TOKEN}"
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "client": ("127.0.0.1", 50000), "server": ("testserver", 80),
        "headers": [(b"host", b"testserver"), (b"content-type", b"application/json"),
                    (b"cookie", cookies.encode()), (b"x-csrftoken", CSRF_TOKEN.encode())],
    }


async def test_a_client_that_leaves_after_three_deltas_leaves_exactly_their_text(
        api, conversation, upstream):
    upstream.script.chunks = ["One", " two", " three", " four", " five", " six"]
    upstream.script.interval_s = 0.3  # a fourth delta is far off when the browser leaves
    session_key = api.cookies[django_settings.SESSION_COOKIE_NAME].value
    browser = ApplicationCommunicator(
        application, scope_for(f"/api/conversations/{conversation.pk}/messages", session_key))
    await browser.send_input({"type": "http.request", "body": json.dumps({"content": "count"}).encode()})

    start = await browser.receive_output(timeout=10)
    parser, deltas = SSEParser(), []
    while len(deltas) < 3:
        message = await browser.receive_output(timeout=10)
        deltas += [json.loads(e.data)["text"] for e in parser.feed(message["body"]) if e.event == "delta"]
    await browser.send_input({"type": "http.disconnect"})
    await browser.wait(timeout=10)
    hung_up = await asyncio.to_thread(upstream.hung_up.wait, 10)

    answer = await sync_to_async(Message.objects.get)(conversation=conversation, role="assistant")
    generation = await sync_to_async(Generation.objects.get)(message=answer)
    assert start["status"] == 200
    assert deltas == ["One", " two", " three"]
    assert hung_up
    assert answer.status == "stopped" and answer.content == "One two three"
    assert generation.finish_reason == "cancelled" and generation.cancelled_by == "client_gone"
    assert generation.final_text == "One two three" and generation.finished_at is not None
