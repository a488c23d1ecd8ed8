"""The OpenAI-compatible HTTP API: stream shape, whole completions, and every refusal."""

import json

import httpx2
import pytest

from inference.engine import loader
from tests.fakes.raising_tokenizer import RaisingTokenizer
from tests.fakes.stalling_runner import StallingRunner
from tests.inference import models
from tests.inference.serving import MODEL_NAME, chat, metric, serving, service_for, sse_events, stream


@pytest.fixture(scope="module")
def tiny_service_url():
    engine = models.engine(models.tiny_model(), max_running=8, max_model_len=256,
                           max_cached_tokens=4096)
    with serving(service_for(engine, max_waiting=8)) as url:
        yield url


def test_a_stream_sends_role_then_content_then_finish_then_usage_then_done(tiny_service_url):
    body = chat(stream=True, max_tokens=6, temperature=0, stream_options={"include_usage": True})
    response, events = stream(tiny_service_url, body)
    prompt_tokens = len(models.engine_tokenizer_prompt(body["messages"]))

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["cache-control"] == "no-cache"
    assert response.headers["x-accel-buffering"] == "no"
    assert events[0]["choices"][0]["delta"] == {"role": "assistant"}
    content = events[1:-3]
    assert content and all(set(e["choices"][0]["delta"]) == {"content"} for e in content)
    assert all(e["choices"][0]["finish_reason"] is None for e in content)
    assert events[-3]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "length"}
    assert events[-2]["choices"] == []
    usage = events[-2]["usage"]
    cached = usage.pop("prompt_tokens_details")["cached_tokens"]
    assert usage == {"prompt_tokens": prompt_tokens, "completion_tokens": 6,
                     "total_tokens": prompt_tokens + 6}
    assert 0 <= cached < prompt_tokens  # other tests' requests may have left a shared prefix
    assert events[-1] == "[DONE]"
    assert len({e["id"] for e in events[:-1]}) == 1


def test_the_prompts_token_count_is_said_in_the_headers_before_the_first_token(tiny_service_url):
    body = chat(stream=True, max_tokens=2, temperature=0)
    response, _ = stream(tiny_service_url, body)
    whole = httpx2.post(f"{tiny_service_url}/v1/chat/completions", json={**body, "stream": False}, timeout=60)

    prompt_tokens = len(models.engine_tokenizer_prompt(body["messages"]))
    assert response.headers["x-prompt-tokens"] == str(prompt_tokens)
    assert whole.headers["x-prompt-tokens"] == str(prompt_tokens) == str(whole.json()["usage"]["prompt_tokens"])


def test_without_include_usage_no_usage_chunk_is_sent(tiny_service_url):
    _, events = stream(tiny_service_url, chat(stream=True, max_tokens=3, temperature=0))

    assert events[-2]["choices"][0]["finish_reason"] == "length"
    assert not any("usage" in e for e in events[:-1])


def test_a_whole_completion_matches_the_streamed_text(tiny_service_url):
    body = chat(max_tokens=8, temperature=0)
    whole = httpx2.post(f"{tiny_service_url}/v1/chat/completions", json=body, timeout=60)
    _, events = stream(tiny_service_url, {**body, "stream": True})
    streamed = "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1] if e["choices"])

    assert whole.status_code == 200
    completion = whole.json()
    assert completion["object"] == "chat.completion"
    assert completion["choices"][0]["message"] == {"role": "assistant", "content": streamed}
    assert completion["choices"][0]["finish_reason"] == "length"
    assert completion["usage"]["completion_tokens"] == 8


def test_the_callers_request_id_names_the_completion(tiny_service_url):
    response, events = stream(tiny_service_url, chat(stream=True, max_tokens=2),
                              headers={"X-Request-Id": "audit-123"})

    assert response.headers["x-request-id"] == "audit-123"
    assert events[0]["id"] == "chatcmpl-audit-123"


def test_models_lists_the_served_model_and_health_is_ok(tiny_service_url):
    listed = httpx2.get(f"{tiny_service_url}/v1/models").json()
    health = httpx2.get(f"{tiny_service_url}/health")

    assert [m["id"] for m in listed["data"]] == [MODEL_NAME]
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert health.json()["decode_step"] == "uncompiled"  # the suite's services do not compile
    assert health.json()["matrices"] in {"plain", "packed", "dot"}  # the layout the service chose


def test_metrics_count_requests_tokens_and_latencies(tiny_service_url):
    stream(tiny_service_url, chat(stream=True, max_tokens=4))
    text = httpx2.get(f"{tiny_service_url}/metrics").text

    assert metric(text, "inference_requests_total", finish_reason="length") >= 1
    assert metric(text, "inference_generated_tokens_total") >= 4
    assert metric(text, "inference_time_to_first_token_seconds_count") >= 1
    assert metric(text, "inference_inter_token_latency_seconds_count") >= 3
    assert metric(text, "inference_queue_wait_seconds_count") >= 1
    assert metric(text, "inference_running_sequences") == 0
    assert metric(text, "inference_kv_cache_bytes") == metric(text, "inference_kv_cache_reusable_bytes")
    assert metric(text, "inference_prefix_cache_kept_rows") >= 1
    assert metric(text, "inference_prefix_cache_kept_tokens") >= 4
    assert metric(text, "inference_prompt_tokens_prefilled_total") >= 1
    # Every step through the fused forward: this service does not compile (nor capture) its steps.
    assert metric(text, "inference_steps_total") >= 4
    assert metric(text, "inference_steps_compiled_total") == metric(text, "inference_steps_replayed_total") == 0


LONG = "word " * 400
ANSWERED = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello"}]
BAD_REQUESTS = [
    ("not json", "invalid_json", None),
    ("[1, 2]", "invalid_request", None),
    ({"messages": [{"role": "user", "content": "hi"}]}, "missing_field", "model"),
    (chat() | {"messages": []}, "invalid_value", "messages"),
    (chat() | {"messages": "hi"}, "invalid_value", "messages"),
    (chat() | {"messages": [{"role": "wizard", "content": "hi"}]}, "invalid_value", "messages[0].role"),
    (chat() | {"messages": [{"role": ["user"], "content": "hi"}]}, "invalid_value", "messages[0].role"),
    (chat(logprobs=0), "unsupported_field", "logprobs"),  # false is asked for, not a number
    (chat() | {"messages": [{"role": "user", "content": 42}]}, "invalid_type", "messages[0].content"),
    (chat() | {"messages": ["hi"]}, "invalid_type", "messages[0]"),
    (chat(temperature=-0.1), "invalid_value", "temperature"),
    (chat(temperature=2.5), "invalid_value", "temperature"),
    (chat(temperature="hot"), "invalid_type", "temperature"),
    (chat(top_p=0), "invalid_value", "top_p"),
    (chat(top_p=1.5), "invalid_value", "top_p"),
    (chat(max_tokens=0), "invalid_value", "max_tokens"),
    (chat(max_tokens=True), "invalid_value", "max_tokens"),
    (chat(max_tokens=5, max_completion_tokens=6), "invalid_value", "max_tokens"),
    (chat(max_completion_tokens=-3), "invalid_value", "max_completion_tokens"),
    (chat(seed="abc"), "invalid_type", "seed"),
    (chat(stream="yes"), "invalid_type", "stream"),
    (chat(stream_options={"include_usage": True}), "invalid_value", "stream_options"),
    (chat(stop=["a", "b", "c", "d", "e"]), "invalid_value", "stop"),
    (chat(stop=""), "invalid_value", "stop"),
    (chat(stop=["fine", "~" * 1025]), "invalid_value", "stop"),  # each is watched for at every token
    (chat(n=2), "invalid_value", "n"),
    (chat(tools=[]), "unsupported_field", "tools"),
    (chat(logprobs=True), "unsupported_field", "logprobs"),
    (chat(presence_penalty=0.5), "unsupported_field", "presence_penalty"),
    (chat(response_format={"type": "json_object"}), "unsupported_field", "response_format"),
    # vLLM's and llama.cpp's rule: writing on at the end of the last message is no new turn.
    (chat() | {"messages": ANSWERED, "continue_final_message": True}, "invalid_value", "add_generation_prompt"),
    (chat() | {"messages": ANSWERED, "continue_final_message": True, "add_generation_prompt": True},
     "invalid_value", "add_generation_prompt"),
    (chat(add_generation_prompt=False), "invalid_value", "add_generation_prompt"),
    (chat(add_generation_prompt="no"), "invalid_type", "add_generation_prompt"),
    (chat(continue_final_message=True, add_generation_prompt=False), "invalid_value", "continue_final_message"),
    (chat(LONG), "context_length_exceeded", "messages"),
    (chat(max_tokens=250), "context_length_exceeded", "max_tokens"),
    (chat(seed=2**64), "invalid_value", "seed"),
    (chat(seed=-2**63 - 1), "invalid_value", "seed"),
    # Python's json reads these words, and 1e400 as infinity; JSON itself has no such numbers.
    (json.dumps(chat()).replace('"messages"', '"temperature": NaN, "messages"'), "invalid_json", None),
    (json.dumps(chat()).replace('"messages"', '"top_p": Infinity, "messages"'), "invalid_json", None),
    (json.dumps(chat()).replace('"messages"', '"temperature": 1e400, "messages"'), "invalid_json", None),
    (json.dumps(chat(stream=True, stream_options={"include_usage": True}))
     .replace('"include_usage": true', '"include_usage": -Infinity'), "invalid_json", None),
    # A lone surrogate escape is valid JSON text but no Unicode character.
    (json.dumps(chat("hi \ud800 there")), "invalid_json", None),
    ("[" * 100_000 + "]" * 100_000, "invalid_json", None),
]


@pytest.mark.parametrize("body, code, param", BAD_REQUESTS)
def test_a_bad_request_is_refused_with_400_before_any_stream_starts(tiny_service_url, body, code, param):
    content = body if isinstance(body, str) else json.dumps(body)

    response = httpx2.post(f"{tiny_service_url}/v1/chat/completions", content=content,
                          headers={"content-type": "application/json"})

    assert response.status_code == 400
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == code
    assert error["param"] == param
    assert error["message"]


def test_a_final_assistant_message_is_written_on_when_asked_as_vllm_asks_it(tiny_service_url):
    body = chat(max_tokens=3, temperature=0) | {"messages": ANSWERED, "continue_final_message": True,
                                                "add_generation_prompt": False}

    response = httpx2.post(f"{tiny_service_url}/v1/chat/completions", json=body)

    assert response.status_code == 200
    assert response.json()["usage"]["completion_tokens"] == 3


def test_fields_clients_send_at_values_that_ask_for_nothing_are_served(tiny_service_url):
    # LangChain's OpenAI client sends both penalties at 0, others logprobs false and a text format.
    body = chat(max_tokens=2, presence_penalty=0, frequency_penalty=0.0, logprobs=False,
                response_format={"type": "text"})

    response = httpx2.post(f"{tiny_service_url}/v1/chat/completions", json=body)

    assert response.status_code == 200, response.text


def test_a_developer_message_is_read_as_the_system_message_it_replaced_at_openai(tiny_service_url):
    def prompt(role: str) -> list[int]:
        messages = [{"role": role, "content": "Be brief."}, {"role": "user", "content": "Hi"}]
        response = httpx2.post(f"{tiny_service_url}/tokenize", json={"model": MODEL_NAME, "messages": messages})
        assert response.status_code == 200, response.text
        return response.json()["tokens"]

    assert prompt("developer") == prompt("system")


def test_messages_the_models_chat_template_refuses_get_its_reason_in_a_400():
    # As Gemma's template refuses a system message, or Mistral's turns that do not alternate.
    engine = models.engine(models.tiny_model())
    engine.prompt_tokenizer.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'system' %}"
        "{{ raise_exception('System role not supported') }}{% endif %}{{ m['content'] }}{% endfor %}")
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    with serving(service_for(engine)) as url:
        answers = [httpx2.post(f"{url}/v1/chat/completions", json=chat(stream=stream) | {"messages": messages})
                   for stream in (True, False)]
        counted = httpx2.post(f"{url}/tokenize", json={"model": MODEL_NAME, "messages": messages})

    for response in (*answers, counted):
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert (error["code"], error["param"]) == ("invalid_messages", "messages")
        assert "System role not supported" in error["message"]


def test_an_unknown_model_is_refused_with_404(tiny_service_url):
    response = httpx2.post(f"{tiny_service_url}/v1/chat/completions",
                          json={**chat(stream=True), "model": "gpt-9"})

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"


def test_an_unplanned_error_in_a_route_answers_a_json_500():
    engine = models.engine(models.tiny_model())
    engine.prompt_tokenizer = RaisingTokenizer()
    with serving(service_for(engine)) as url:
        response = httpx2.post(f"{url}/v1/chat/completions", json=chat(stream=True), timeout=60)

    assert response.status_code == 500
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["type"] == "server_error" and error["code"] == "internal_error"
    assert "injected fault" not in error["message"]  # internals stay in the log


def test_a_full_waiting_queue_is_refused_with_429_before_any_stream_starts():
    engine = models.engine(models.tiny_model(), max_running=1)
    stall = engine.runner = StallingRunner(engine.runner)
    with serving(service_for(engine, max_waiting=1)) as url, httpx2.Client(timeout=60) as client:
        with client.stream("POST", f"{url}/v1/chat/completions", json=chat(stream=True, max_tokens=2)) as first:
            assert stall.entered.wait(30)  # the first request holds the only running place
            with client.stream("POST", f"{url}/v1/chat/completions",
                               json=chat(stream=True, max_tokens=2)) as second:
                refused = httpx2.post(f"{url}/v1/chat/completions", json=chat(stream=True, max_tokens=2))
                stall.released.set()
                second_events = sse_events(second.read())
            first_events = sse_events(first.read())

    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "queue_full"
    assert refused.headers["Retry-After"] == "1"  # a place comes free as soon as a running answer ends
    assert first_events[-1] == "[DONE]" and second_events[-1] == "[DONE]"


def test_requests_before_the_model_is_loaded_get_503_and_health_says_loading():
    from inference.config import InferenceConfig
    from inference.service import InferenceService

    service = InferenceService(InferenceConfig())
    with serving(service) as url:
        response = httpx2.post(f"{url}/v1/chat/completions", json=chat(stream=True))
        health = httpx2.get(f"{url}/health")
        listed = httpx2.get(f"{url}/v1/models")

    assert response.status_code == 503
    assert response.json()["error"]["code"] == "service_unavailable"
    assert response.headers["Retry-After"] == "5"  # a model loads in seconds to a minute
    assert health.status_code == 503 and health.json()["status"] == "loading"
    # Not an empty list: a client that lists models to pick one (the chat's catalogue) would
    # take the service, restarting, for one that serves nothing, and refuse its answers for good.
    assert listed.status_code == 503 and listed.json()["error"]["code"] == "service_unavailable"


def test_retrieving_a_model_before_the_model_is_loaded_gets_503_not_a_404_naming_no_model():
    """A client that checks its model before asking for completions must learn to wait, not
    that the model does not exist (the service knows its model's name once it is loaded)."""
    from inference.config import InferenceConfig
    from inference.service import InferenceService

    with serving(InferenceService(InferenceConfig())) as url:
        response = httpx2.get(f"{url}/v1/models/SmolLM2-135M-Instruct")

    assert response.status_code == 503
    assert response.json()["error"]["code"] == "service_unavailable"
    assert "loading" in response.json()["error"]["message"]


def test_the_default_model_is_found_inside_its_package():
    path = loader.default_model_path()

    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.is_file()


def test_the_served_model_is_retrieved_by_its_id_and_another_is_not_found(tiny_service_url):
    listed = httpx2.get(f"{tiny_service_url}/v1/models").json()["data"][0]

    found = httpx2.get(f"{tiny_service_url}/v1/models/{MODEL_NAME}")
    missing = httpx2.get(f"{tiny_service_url}/v1/models/gpt-5")

    assert found.status_code == 200
    assert found.json() == {**listed, "created": found.json()["created"]}
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "model_not_found"
    assert missing.json()["error"]["param"] == "model"


@pytest.mark.parametrize("method, path, status, code", [
    ("POST", "/v1/completions", 404, "not_found"),
    ("GET", "/v1/embeddings", 404, "not_found"),
    ("GET", "/v1/chat/completions", 405, "method_not_allowed"),
    ("DELETE", "/v1/models", 405, "method_not_allowed"),
])
def test_an_unknown_route_or_method_is_an_openai_error(tiny_service_url, method, path, status,
                                                        code):
    response = httpx2.request(method, f"{tiny_service_url}{path}")

    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert (error["code"], error["type"]) == (code, "invalid_request_error") and error["message"]
    if status == 405:
        assert response.headers["allow"]
