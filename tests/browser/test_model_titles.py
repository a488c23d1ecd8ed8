"""The model's title for a new conversation shows in the sidebar and the heading without a reload
(nginx, daphne, a Celery worker with Redis, and the inference service with the default model)."""

import contextlib
import json
import os

import pytest

from chatapp.models import Conversation
from harness import waiting

from harness.page_probes import send, wait_for_end, wait_for_true
from tests.browser.conftest import running_stack, sign_in
from tests.celery_worker import DEFAULT_QUEUE, celery_worker

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def titling_stack(django_db_setup, inference_url, tmp_path_factory):
    worker = (celery_worker(DEFAULT_QUEUE, INFERENCE_URL=inference_url) if os.environ.get("REDIS_URL")
              else contextlib.nullcontext())  # without Redis the task runs in daphne's process
    with worker, running_stack(inference_url, tmp_path_factory.mktemp("titles"), TEST_CHAT_MODEL_TITLES=1,
                               CHAT_TEMPERATURE=0, CHAT_MAX_TOKENS=40) as url:
        yield url


def test_the_sidebar_and_the_heading_show_the_models_title_without_a_reload(page, titling_stack, user):
    sign_in(page, titling_stack, user)
    page.evaluate("window.__notReloaded = true")

    send(page, QUESTION)
    wait_for_end(page)
    waiting.wait_until(lambda: Conversation.objects.filter(owner=user).exclude(title=QUESTION).exists(), 60,
                       "the model's title to be saved")
    title = Conversation.objects.get(owner=user).title
    wait_for_true(page, f"document.querySelector('#conversation-list .conversation-open')?.textContent === {json.dumps(title)}"
                  f" && document.getElementById('conversation-title').textContent === {json.dumps(title)}")

    assert page.evaluate("window.__notReloaded") is True
    assert page.console_errors == []
