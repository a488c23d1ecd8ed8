"""Fuzzing the inference service alone: requests generated from docs/openapi-inference.yaml and
hostile bodies, against a real server with the real model. No answer may be a 5xx, and the
service must still answer /health with 200 after each request."""

import httpx2
import pytest
from hypothesis import given

from tests.fuzz import hostile
from tests.fuzz.conftest import fuzz_settings
from tests.fuzz.operations import cases, described, operations
from tests.fuzz.tally import RUN, assert_none_found, exchange
from tests.inference.serving import real_model_serving

pytestmark = pytest.mark.fuzz

OPERATIONS = operations("openapi-inference.yaml")
COMPLETIONS = "POST /v1/chat/completions"
VALID = {"model": "SmolLM2-135M-Instruct", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
SLOTS = ["model", "temperature", "top_p", "max_tokens", "seed", "stop", "n", "stream", "user"]
BODY_TEMPLATES = {slot: {**VALID, slot: hostile.SLOT} for slot in SLOTS}
BODY_TEMPLATES["messages[0].content"] = {**VALID, "messages": [{"role": "user", "content": hostile.SLOT}]}
TOKENIZE = "POST /tokenize"
TOKENIZE_TEMPLATES = {
    "model": {"model": hostile.SLOT, "messages": VALID["messages"]},
    "prompt": {"prompt": hostile.SLOT},
    "add_generation_prompt": {"messages": VALID["messages"], "add_generation_prompt": hostile.SLOT},
    "messages[0].content": {"messages": [{"role": "user", "content": hostile.SLOT}]},
}


@pytest.fixture(scope="module")
def inference_url():
    # A short context, so that a generated max_tokens that fits ends in seconds on a CPU.
    with real_model_serving(max_running=4, max_model_len=96) as url:
        yield url


def send_and_check_health(url: str, send):
    """The request's answer, or the health check's when the request left the service unhealthy."""
    response = send()
    health = httpx2.get(url + "/health")
    return response if response.status_code >= 500 or health.status_code == 200 else health


@pytest.mark.parametrize("endpoint", OPERATIONS)
def test_generated_requests_get_no_server_error(endpoint, inference_url):
    findings = []

    @fuzz_settings()
    @given(case=cases(OPERATIONS[endpoint]))
    def send_one(case):
        findings.append(exchange(endpoint, "generated", described(case), send=lambda: send_and_check_health(
            inference_url, lambda: case.call(base_url=inference_url, timeout=120))))

    send_one()

    assert findings  # the fuzz did run
    assert_none_found(findings)


def test_hostile_bodies_get_no_server_error(inference_url):
    with httpx2.Client(base_url=inference_url, timeout=120) as client:
        findings = [exchange(endpoint, what, f"{endpoint} with {what}",
                             send=lambda body=body, path=endpoint.split(" ")[1]: send_and_check_health(
                                 inference_url, lambda: client.post(
                                     path, content=body, headers={"Content-Type": "application/json"})))
                    for endpoint, templates in [(COMPLETIONS, BODY_TEMPLATES), (TOKENIZE, TOKENIZE_TEMPLATES)]
                    for what, body in hostile.bodies(templates)]

    assert_none_found(findings)


def test_the_inference_service_is_healthy_after_the_fuzz(inference_url):
    status = httpx2.get(inference_url + "/health").status_code
    RUN.health["inference alone /health"] = status

    assert status == 200
