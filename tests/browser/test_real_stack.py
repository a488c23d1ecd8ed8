"""The whole product in a browser: nginx, daphne and the inference service with the default model."""

import os
import shutil
from pathlib import Path

import httpx2
import pytest

from chatapp.models import Message
from harness import waiting

from harness.page_probes import FRAME_PROBE, last_answer, send, wait_for_end, wait_for_true
from tests.browser.conftest import running_stack, sign_in
from tests.inference.serving import metric

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
DOCS = Path(__file__).resolve().parent.parent.parent / "docs"


@pytest.fixture(scope="module")
def real_stack(django_db_setup, inference_url, tmp_path_factory):
    # Greedy and short, so that answers are quick and repeatable.
    with running_stack(inference_url, tmp_path_factory.mktemp("real"), CHAT_TEMPERATURE=0,
                       CHAT_MAX_TOKENS=120) as url:
        yield url


@pytest.fixture
def chat(page, real_stack, user):
    page.add_init_script(FRAME_PROBE)
    sign_in(page, real_stack, user)
    return page


def plain(text: str) -> list[str]:
    """Words without Markdown marks: the stored text is raw, the shown one rendered."""
    return "".join(ch for ch in text if ch not in "*_#`>").split()


def running_sequences(inference_url: str) -> float:
    return metric(httpx2.get(f"{inference_url}/metrics").text, "inference_running_sequences")


def test_the_default_model_answers_growing_frame_by_frame(chat):
    send(chat, "Write three sentences about the sea.")
    wait_for_end(chat)

    answer = last_answer(chat)
    assert len(set(chat.evaluate("window.__growth"))) >= 3
    assert answer.get_attribute("data-status") in ("completed", "truncated")
    assert answer.locator(".message-meta").inner_text()  # TTFT and tokens, quietly
    assert chat.console_errors == []


def test_stop_freezes_the_text_the_server_keeps_exactly_it_and_the_engine_lets_go(chat, inference_url):
    send(chat, "Write a long story about a dragon who learns to cook.")
    wait_for_true(chat, "window.chatappStats.paints >= 3")
    chat.click("#stop")
    wait_for_end(chat)
    shown = last_answer(chat).locator(".message-content").inner_text()
    chat.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")

    assert last_answer(chat).get_attribute("data-status") == "stopped"
    assert last_answer(chat).locator(".message-content").inner_text() == shown
    waiting.wait_until(lambda: Message.objects.filter(role="assistant", status="stopped").exists(),
                       30, "the stopped answer to be saved")
    stored = Message.objects.get(role="assistant")
    assert stored.generations.get().cancelled_by == "user"
    assert plain(stored.content) == plain(shown)
    waiting.wait_until(lambda: running_sequences(inference_url) == 0, 30, "the engine to drop the sequence")


def test_a_finished_conversation_looks_right_in_light_and_dark(chat, tmp_path):
    send(chat, "Give me a Python function that adds two numbers, in a code block.")
    wait_for_end(chat)
    shots = {}
    for scheme in ("light", "dark"):
        chat.emulate_media(color_scheme=scheme)
        shots[scheme] = tmp_path / f"screenshot-{scheme}.png"
        chat.screenshot(path=str(shots[scheme]))

    assert shots["light"].read_bytes() != shots["dark"].read_bytes()
    if os.environ.get("CHATAPP_UPDATE_SCREENSHOTS"):
        for scheme, path in shots.items():
            shutil.copy(path, DOCS / path.name)
