"""The default model through the HTTP API: multi-byte text and stop strings over the wire."""

import httpx2
import pytest

from inference.engine import LLMEngine
from tests.inference import models
from tests.inference.serving import serving, service_for, sse_events

pytestmark = pytest.mark.slow
NAME = "SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def real_url():
    engine = LLMEngine(models.real_model(), models.tokenizer(), models.limits(max_running=4))
    with serving(service_for(engine, NAME)) as url:
        yield url


def body(content: str, **fields) -> dict:
    return {"model": NAME, "messages": [{"role": "user", "content": content}], "temperature": 0,
            **fields}


def streamed(url: str, request: dict) -> tuple[list[str], list]:
    with httpx2.stream("POST", f"{url}/v1/chat/completions", json={**request, "stream": True},
                      timeout=120) as response:
        events = sse_events(response.read())
    deltas = [e["choices"][0]["delta"].get("content", "") for e in events[:-1] if e.get("choices")]
    return deltas, events


def whole(url: str, request: dict) -> dict:
    return httpx2.post(f"{url}/v1/chat/completions", json=request, timeout=120).json()


def test_emoji_and_cjk_arrive_in_whole_characters_and_add_up_to_the_whole_answer(real_url):
    request = body("Repeat exactly, nothing else: 你好世界！👍🏽🎉 日本語 😀", max_tokens=40)

    deltas, _ = streamed(real_url, request)
    text = whole(real_url, request)["choices"][0]["message"]["content"]

    assert any(ord(ch) > 0x2E80 for ch in text)  # the model did write wide characters
    assert "".join(deltas) == text
    assert all("\ufffd" not in delta for delta in deltas)


def test_a_stop_string_spanning_tokens_ends_the_answer_without_being_sent(real_url):
    request = body("Write a short story about a cat.", max_tokens=30)
    full = whole(real_url, request)["choices"][0]["message"]["content"]
    ids = models.tokenizer().encode(full, add_special_tokens=False)
    stop = models.tokenizer().decode(ids[len(ids) // 2 : len(ids) // 2 + 2])  # two tokens' text
    assert len(stop) > 2 and stop in full

    deltas, events = streamed(real_url, {**request, "stop": [stop, "never appears"]})

    assert "".join(deltas) == full[: full.index(stop)]
    assert events[-2]["choices"][0]["finish_reason"] == "stop"
