"""A request body is bounded in size, and a long prompt is encoded without holding up the service."""

import json
import os

import httpx2
import pytest

from inference.server import create_app
from inference.service import LONG_PROMPT_NICENESS
from tests.fakes.stalling_tokenizer import StallingTokenizer
from tests.inference import models
from tests.inference.serving import chat, serving, service_for, while_stalled

CAP = 4096


@pytest.fixture(scope="module")
def capped_url():
    engine = models.engine(models.tiny_model(), max_model_len=256)
    with serving(service_for(engine, max_body_bytes=CAP)) as url:
        yield url


def assert_too_large(response: httpx2.Response) -> None:
    assert response.status_code == 413
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == "body_too_large" and error["type"] == "invalid_request_error"
    assert str(CAP) in error["message"]


def test_a_body_whose_declared_length_is_over_the_cap_is_refused_with_413(capped_url):
    response = httpx2.post(f"{capped_url}/v1/chat/completions", json=chat("x" * 2 * CAP))

    assert_too_large(response)


def test_a_chunked_body_that_grows_over_the_cap_is_refused_with_413(capped_url):
    body = json.dumps(chat("x" * 2 * CAP)).encode()

    def chunks():  # no Content-Length: the body arrives chunked
        for start in range(0, len(body), 1000):
            yield body[start:start + 1000]

    response = httpx2.post(f"{capped_url}/v1/chat/completions", content=chunks(),
                          headers={"content-type": "application/json"})

    assert "content-length" not in response.request.headers
    assert_too_large(response)


def test_a_body_just_under_the_cap_is_read_whole(capped_url):
    request = chat("x" * 10, max_tokens=2, user="")
    padding = CAP - 1 - len(json.dumps(request))
    content = json.dumps({**request, "user": "u" * padding}).encode()

    response = httpx2.post(f"{capped_url}/v1/chat/completions", content=content,
                          headers={"content-type": "application/json"})

    assert len(content) == CAP - 1
    assert response.status_code == 200


async def test_health_answers_while_a_long_prompt_is_being_encoded():
    engine = models.engine(models.tiny_model(), max_model_len=256)
    stall = engine.prompt_tokenizer = StallingTokenizer(engine.prompt_tokenizer)
    with serving(service_for(engine)) as url:
        health, refused = await while_stalled(url, stall, lambda client: client.post(
            f"{url}/v1/chat/completions", json=chat("many words " * 20_000, stream=True)))

    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "context_length_exceeded"


async def test_a_short_prompt_is_answered_while_a_long_one_is_being_encoded():
    engine = models.engine(models.tiny_model(), max_model_len=256)
    stall = engine.prompt_tokenizer = StallingTokenizer(engine.prompt_tokenizer, held=1)
    with serving(service_for(engine)) as url:
        answered, refused = await while_stalled(
            url, stall,
            send=lambda client: client.post(f"{url}/v1/chat/completions",
                                            json=chat("many words " * 20_000)),
            meanwhile=lambda client: client.post(f"{url}/v1/chat/completions",
                                                 json=chat("Hi", max_tokens=2), timeout=10))

    assert answered.status_code == 200
    assert answered.json()["usage"]["completion_tokens"] == 2
    assert refused.status_code == 400
    # The long one on a thread that yields the CPU to the step's products, the short one not.
    here = os.getpriority(os.PRIO_PROCESS, 0)
    assert stall.niceness == [min(here + LONG_PROMPT_NICENESS, 19), here]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/tokenize"])
async def test_a_client_that_leaves_before_its_body_is_whole_is_no_error_of_the_service(path):
    """uvicorn logs "Exception in ASGI application" with a traceback for whatever the app
    raises: a client that hangs up mid-upload is a client gone, as one that leaves mid-answer."""
    service = service_for(models.engine(models.tiny_model(), max_model_len=256))
    body = json.dumps(chat("x" * 100)).encode()
    arriving = iter([{"type": "http.request", "body": body[:40], "more_body": True},
                     {"type": "http.disconnect"}])
    sent = []

    async def receive():
        return next(arriving)

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
             "root_path": "", "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8001),
             "headers": [(b"content-type", b"application/json"),
                         (b"content-length", str(len(body)).encode())]}
    try:
        await create_app(service, load=False)(scope, receive, send)
    finally:
        service.stop()

    statuses = [message["status"] for message in sent if message["type"] == "http.response.start"]
    assert all(status < 500 for status in statuses)
