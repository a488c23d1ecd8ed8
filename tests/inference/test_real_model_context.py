"""The default model's whole context, loaded as `python -m inference` loads it, counted exactly."""

import json

import httpx2
import pytest

from harness import waiting
from inference.config import InferenceConfig
from inference.server import create_app
from inference.service import InferenceService
from tests import servers
from tests.inference import models

pytestmark = pytest.mark.slow
NAME = "SmolLM2-135M-Instruct"
NOTES = ("The old harbour welcomes travellers from distant towns before the sun rises. "
         "A quiet village remembers the songs of fishermen during the long rainy season. ")


@pytest.fixture(scope="module")
def default_url():
    """The service as its defaults configure it (the context left to the model), real model; its
    decode step not compiled (minutes of both cores: test_decode_graph.py holds that path)."""
    service = InferenceService(InferenceConfig(max_running=4, matrices="plain", compile="off"))
    with servers.uvicorn_in_thread(create_app(service)) as url:
        waiting.wait_until(lambda: httpx2.get(f"{url}/health").status_code != 503 or service.error,
                           300, "the model to load")
        assert httpx2.get(f"{url}/health").status_code == 200, service.error
        yield url
    service.stop()


def count(url: str, body: dict) -> dict:
    response = httpx2.post(f"{url}/tokenize", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def completion(url: str, messages: list[dict], **fields) -> httpx2.Response:
    return httpx2.post(f"{url}/v1/chat/completions", timeout=300, json={
        "model": NAME, "messages": messages, "temperature": 0, "max_tokens": 1, **fields})


def test_the_default_context_is_the_models_own(default_url):
    trained = json.loads((models.default_model_dir() / "config.json").read_text())["max_position_embeddings"]

    listed = httpx2.get(f"{default_url}/v1/models").json()["data"]

    assert trained == 8192
    assert [(m["id"], m["max_model_len"]) for m in listed] == [(NAME, trained)]
    assert count(default_url, {"prompt": "hi"})["max_model_len"] == trained


@pytest.mark.parametrize("messages, fields", [
    ([{"role": "user", "content": "What is the capital of France?"}], {}),
    ([{"role": "system", "content": "You answer in French."},
      {"role": "user", "content": "Notes: " + NOTES * 3 + "\nSummarise them. 你好 👍🏽"},
      {"role": "assistant", "content": "Le vieux port accueille les voyageurs."},
      {"role": "user", "content": "And the village?"}], {}),
    ([{"role": "user", "content": "Count to five."}, {"role": "assistant", "content": "One, two,"}],
     {"continue_final_message": True, "add_generation_prompt": False}),
])
def test_a_count_equals_the_prompt_tokens_a_completion_of_the_same_messages_reports(default_url, messages, fields):
    counted = count(default_url, {"model": NAME, "messages": messages, **fields})

    answered = completion(default_url, messages, **fields)

    assert answered.status_code == 200, answered.text
    assert counted["count"] == answered.json()["usage"]["prompt_tokens"] == int(answered.headers["x-prompt-tokens"])
    assert counted["tokens"] == models.tokenizer().apply_chat_template(
        messages, add_generation_prompt=not fields, continue_final_message=bool(fields),
        tokenize=True, return_dict=False)


def test_a_prompt_beyond_the_old_2048_token_context_is_answered(default_url):
    messages = [{"role": "user", "content": "Notes: " + NOTES * 85 + "\nWhat does the harbour do?"}]
    counted = count(default_url, {"messages": messages})["count"]

    answered = completion(default_url, messages, max_tokens=2)

    assert 2048 < counted < 3000
    assert answered.status_code == 200, answered.text
    assert answered.json()["usage"]["prompt_tokens"] == counted


def test_what_does_not_fit_the_models_context_is_refused_naming_the_part(default_url):
    too_long = [{"role": "user", "content": NOTES * 320}]
    short = [{"role": "user", "content": "Hi"}]
    room = 8192 - count(default_url, {"messages": short})["count"]

    prompt_refused = completion(default_url, too_long)
    answer_refused = completion(default_url, short, max_tokens=room + 1)

    assert count(default_url, {"messages": too_long})["count"] > 8192
    assert prompt_refused.status_code == answer_refused.status_code == 400
    assert prompt_refused.json()["error"]["code"] == answer_refused.json()["error"]["code"] == "context_length_exceeded"
    assert (prompt_refused.json()["error"]["param"], answer_refused.json()["error"]["param"]) == ("messages", "max_tokens")
