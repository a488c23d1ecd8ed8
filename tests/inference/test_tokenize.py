"""POST /tokenize in vLLM's shape: a prompt counted exactly as a completion of it is, or refused."""

import json

import httpx2
import pytest

from inference.config import InferenceConfig
from inference.service import InferenceService
from tests.fakes.stalling_tokenizer import StallingTokenizer
from tests.inference import models
from tests.inference.serving import MODEL_NAME, chat, serving, service_for, while_stalled

CONTEXT = 256
TALK = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"},
        {"role": "assistant", "content": "Hi! How can I help?"}, {"role": "user", "content": "Tell me a joke"}]
ANSWERED = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello"}]
CONTINUED = {"continue_final_message": True, "add_generation_prompt": False}


@pytest.fixture(scope="module")
def tiny_url():
    engine = models.engine(models.tiny_model(), max_model_len=CONTEXT)
    with serving(service_for(engine)) as url:
        yield url


def tokenize(url: str, body) -> httpx2.Response:
    content = body if isinstance(body, str) else json.dumps(body)
    return httpx2.post(f"{url}/tokenize", content=content, headers={"content-type": "application/json"},
                      timeout=60)


def prompt_tokens(url: str, messages: list[dict], **fields) -> int:
    completion = httpx2.post(f"{url}/v1/chat/completions", timeout=60,
                            json=chat(max_tokens=1, temperature=0, **fields) | {"messages": messages})
    assert completion.status_code == 200, completion.text
    return completion.json()["usage"]["prompt_tokens"]


def test_messages_are_counted_with_the_chat_template_a_completion_of_them_applies(tiny_url):
    response = tokenize(tiny_url, {"model": MODEL_NAME, "messages": TALK})

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    expected = models.engine_tokenizer_prompt(TALK)
    assert response.json() == {"count": len(expected), "max_model_len": CONTEXT, "tokens": expected}
    assert response.json()["count"] == prompt_tokens(tiny_url, TALK)


def test_a_final_message_written_on_is_counted_open_as_a_continuing_completion_sees_it(tiny_url):
    opened = tokenize(tiny_url, {"messages": ANSWERED}).json()
    continued = tokenize(tiny_url, {"messages": ANSWERED, **CONTINUED}).json()

    assert continued["count"] == prompt_tokens(tiny_url, ANSWERED, **CONTINUED)
    # The message stays open: no end of turn, no new assistant turn after it.
    assert continued["count"] < opened["count"]
    assert opened["tokens"][: continued["count"]] == continued["tokens"]


def test_the_model_may_be_left_out_as_vllm_allows(tiny_url):
    named = tokenize(tiny_url, {"model": MODEL_NAME, "messages": TALK})
    unnamed = tokenize(tiny_url, {"messages": TALK, "add_generation_prompt": True,
                                  "continue_final_message": False})

    assert unnamed.status_code == 200 and unnamed.json() == named.json()


def test_a_plain_prompt_is_counted_as_the_tokenizer_encodes_it(tiny_url):
    response = tokenize(tiny_url, {"model": MODEL_NAME, "prompt": "Hello there, 你好 👍"})

    expected = models.tokenizer()("Hello there, 你好 👍")["input_ids"]
    assert response.status_code == 200
    assert response.json() == {"count": len(expected), "max_model_len": CONTEXT, "tokens": expected}


def test_a_prompt_longer_than_the_context_is_still_counted(tiny_url):
    response = tokenize(tiny_url, {"messages": [{"role": "user", "content": "word " * 400}]})

    assert response.status_code == 200
    assert response.json()["count"] > response.json()["max_model_len"] == CONTEXT


BAD_BODIES = [
    ("not json", "invalid_json", None),
    ("[1, 2]", "invalid_request", None),
    ({}, "missing_field", "messages"),
    ({"model": MODEL_NAME}, "missing_field", "messages"),
    ({"messages": TALK, "prompt": "hi"}, "invalid_value", "prompt"),
    ({"prompt": 42}, "invalid_type", "prompt"),
    ({"prompt": "hi", "add_generation_prompt": True}, "unsupported_field", "add_generation_prompt"),
    ({"messages": TALK, "stream": True}, "unsupported_field", "stream"),
    ({"messages": TALK, "model": 7}, "invalid_type", "model"),
    ({"messages": TALK, "model": ""}, "invalid_value", "model"),
    ({"messages": []}, "invalid_value", "messages"),
    ({"messages": "hi"}, "invalid_value", "messages"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "invalid_value", "messages[0].role"),
    ({"messages": [{"role": "user", "content": 42}]}, "invalid_type", "messages[0].content"),
    ({"messages": TALK, "add_generation_prompt": "yes"}, "invalid_type", "add_generation_prompt"),
    ({"messages": TALK, "continue_final_message": 1}, "invalid_type", "continue_final_message"),
    # The same rules as a completion's: writing on at the end of the last message is no new turn.
    ({"messages": ANSWERED, "continue_final_message": True}, "invalid_value", "add_generation_prompt"),
    ({"messages": TALK, "add_generation_prompt": False}, "invalid_value", "add_generation_prompt"),
    ({"messages": TALK, **CONTINUED}, "invalid_value", "continue_final_message"),
    (json.dumps({"prompt": "hi \ud800 there"}), "invalid_json", None),
    ('{"prompt": "hi", "prompt": NaN}', "invalid_json", None),
]


@pytest.mark.parametrize("body, code, param", BAD_BODIES)
def test_a_bad_body_is_refused_with_a_json_400(tiny_url, body, code, param):
    response = tokenize(tiny_url, body)

    assert response.status_code == 400
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", code, param)
    assert error["message"]


def test_an_unknown_model_is_refused_with_404(tiny_url):
    response = tokenize(tiny_url, {"model": "gpt-9", "messages": TALK})

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"


def test_models_say_the_context_a_prompt_and_its_answer_must_fit(tiny_url):
    listed = httpx2.get(f"{tiny_url}/v1/models").json()

    assert [(m["id"], m["max_model_len"]) for m in listed["data"]] == [(MODEL_NAME, CONTEXT)]


def test_before_the_model_is_loaded_tokenize_answers_503():
    with serving(InferenceService(InferenceConfig())) as url:
        response = tokenize(url, {"messages": TALK})

    assert response.status_code == 503
    assert response.json()["error"]["code"] == "service_unavailable"


async def test_health_answers_while_messages_are_being_tokenized():
    engine = models.engine(models.tiny_model(), max_model_len=CONTEXT)
    stall = engine.prompt_tokenizer = StallingTokenizer(engine.prompt_tokenizer)
    with serving(service_for(engine)) as url:
        health, counted = await while_stalled(url, stall, lambda client: client.post(
            f"{url}/tokenize", json={"messages": TALK}))

    assert health.status_code == 200
    assert counted.status_code == 200 and counted.json()["count"] == len(models.engine_tokenizer_prompt(TALK))
