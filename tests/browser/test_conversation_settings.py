"""A conversation's settings in a real browser through nginx: the system prompt reaches the model
first, the model picker moves the next answer to another upstream, both survive a reload, and a
refused value is a sentence on the page with nothing stored. Two stand-in upstreams serve two
models; the first echoes what it was asked."""

import contextlib
import json

import pytest

from chatapp.models import Conversation, Message
from harness import waiting
from tests import factories, servers
from tests.browser.conftest import held, open_conversation, running_stack, sign_in
from harness.page_probes import last_answer, send, wait_for_end, wait_for_handled, wait_for_true
from tests.fakes.upstream import DEFAULT_MODEL, FakeUpstream, Script

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
OTHER_MODEL = "llama-3.2-1b"
PIRATE = "Talk like a pirate."


@pytest.fixture(scope="module")
def upstreams():
    with contextlib.ExitStack() as running:
        pair = []
        for name in (DEFAULT_MODEL, OTHER_MODEL):
            fake = FakeUpstream()
            fake.url = running.enter_context(servers.uvicorn_in_thread(fake))
            fake.models = [name]
            pair.append(fake)
        yield pair


@pytest.fixture(scope="module")
def stack(django_db_setup, django_db_blocker, upstreams, tmp_path_factory):
    with running_stack(",".join(fake.url for fake in upstreams), tmp_path_factory.mktemp("settings"),
                       INFERENCE_MODELS_INTERVAL_SECONDS=0.2) as url:
        yield url


@pytest.fixture
def chat(page, stack, user, upstreams):
    ours, other = upstreams
    ours.reset(Script(echo=True), models=[DEFAULT_MODEL])
    other.reset(Script(chunks=["Answered by ", "the other model."]), models=[OTHER_MODEL])
    sign_in(page, stack, user)
    wait_for_true(page, f"[...document.querySelectorAll('#model-picker option')].length === 2")
    return page


def open_settings(page) -> None:
    if page.locator("#settings-panel").is_hidden():
        page.click("#settings-toggle")


def save_settings(page, *, system_prompt: str | None = None, temperature: str | None = None) -> None:
    open_settings(page)
    if system_prompt is not None:
        page.fill("#settings-system-prompt", system_prompt)
    if temperature is not None:
        page.fill("#settings-temperature", temperature)
    page.click("#settings-panel [type=submit]")


def test_the_system_prompt_goes_first_the_picked_model_answers_next_and_a_reload_keeps_both(chat, user, upstreams):
    ours, other = upstreams
    save_settings(chat, system_prompt=PIRATE)
    send(chat, "Hello")
    wait_for_end(chat)
    echoed = last_answer(chat).locator(".message-content").inner_text()

    chat.select_option("#model-picker", OTHER_MODEL)
    waiting.wait_until(lambda: Conversation.objects.filter(owner=user, model=OTHER_MODEL).exists(), 10,
                       "the picked model to be stored")
    send(chat, "And now?")
    wait_for_end(chat)
    second = last_answer(chat).locator(".message-content").inner_text()
    chat.reload()
    chat.wait_for_selector("#composer")
    wait_for_true(chat, f"document.getElementById('model-picker').value === {OTHER_MODEL!r}"
                  " && document.querySelectorAll('#model-picker option').length === 2")
    open_settings(chat)

    assert echoed.splitlines()[0] == f"system: {PIRATE}"
    assert ours.requests[0][0]["messages"][0] == {"role": "system", "content": PIRATE}
    assert second == "Answered by the other model."
    assert len(ours.requests) == 1 and len(other.requests) == 1
    assert other.requests[0][0]["model"] == OTHER_MODEL
    assert other.requests[0][0]["messages"][0] == {"role": "system", "content": PIRATE}
    assert chat.locator("#settings-system-prompt").input_value() == PIRATE
    assert chat.locator("#model-picker option").all_inner_texts() == [DEFAULT_MODEL, OTHER_MODEL]
    assert chat.console_errors == []


def test_settings_saved_in_one_conversation_answered_after_another_opened_stay_with_the_first(
        chat, user):
    alpha = factories.conversation(owner=user, title="Alpha", system_prompt="Be A.")
    beta = factories.conversation(owner=user, title="Beta", system_prompt="Be B.")
    chat.reload()
    open_conversation(chat, alpha)
    saves = held(chat, f"**/api/conversations/{alpha.pk}", method="PATCH")
    save_settings(chat, system_prompt="Be A, again.")
    wait_for_handled(chat, lambda: len(saves) == 1, "the settings sent")

    open_conversation(chat, beta)
    saves[0].continue_()
    wait_for_true(chat, "document.getElementById('announcer').textContent.startsWith('Settings saved')")

    assert chat.locator("#settings-system-prompt").input_value() == "Be B."
    chat.select_option("#model-picker", OTHER_MODEL)
    waiting.wait_until(lambda: Conversation.objects.get(pk=beta.pk).model == OTHER_MODEL, 10,
                       "the picked model stored for the conversation on screen")
    alpha.refresh_from_db()
    assert (alpha.system_prompt, alpha.model_name) == ("Be A, again.", DEFAULT_MODEL)


def test_a_system_prompt_being_written_is_kept_when_the_model_is_changed_meanwhile(chat, user):
    send(chat, "Hello")
    wait_for_end(chat)
    open_settings(chat)
    chat.fill("#settings-system-prompt", "Answer in one sentence.")  # not saved yet

    chat.select_option("#model-picker", OTHER_MODEL)
    wait_for_true(chat, "document.getElementById('announcer').textContent.startsWith('Answers now come from')")

    assert chat.locator("#settings-system-prompt").input_value() == "Answer in one sentence."
    assert Conversation.objects.get(owner=user).system_prompt == ""


def test_a_system_prompt_the_server_refused_stays_in_the_form_to_be_mended(chat, user):
    send(chat, "Hello")
    wait_for_end(chat)
    open_settings(chat)
    # Refused by a rule of the server's that the page does not check first (400).
    saves = held(chat, "**/api/conversations/*", method="PATCH")
    refused = "A long, careful system prompt."
    chat.fill("#settings-system-prompt", refused)

    chat.click("#settings-panel [type=submit]")
    wait_for_handled(chat, lambda: len(saves) == 1, "the settings sent")
    saves[0].fulfill(status=400, content_type="application/json", body=json.dumps(
        {"error": {"code": "system_prompt_too_long", "message": "refused by the test"}}))

    chat.wait_for_selector("#settings-error:not([hidden])")
    assert chat.locator("#settings-system-prompt").input_value() == refused
    assert Conversation.objects.get(owner=user).system_prompt == ""


def test_a_temperature_out_of_range_is_a_sentence_and_nothing_is_stored(chat, user):
    send(chat, "Hello")
    wait_for_end(chat)

    save_settings(chat, temperature="2.5")

    chat.wait_for_selector("#settings-error:not([hidden])")
    assert chat.locator("#settings-error").inner_text() == (
        "Temperature must be a number from 0 to 2, or empty for the default.")
    assert Conversation.objects.get(owner=user).temperature is None


def test_a_model_gone_since_the_page_loaded_is_refused_with_a_sentence_and_nothing_is_stored(chat, user, upstreams):
    send(chat, "Hello")
    wait_for_end(chat)
    upstreams[1].models = []  # the other upstream no longer serves its model
    wait_for_true(chat, "fetch('/api/models').then((r) => r.json()).then((j) => j.models.length === 1)")
    assert chat.locator("#model-picker option").count() == 2  # as the page read them at sign-in

    chat.select_option("#model-picker", OTHER_MODEL)

    chat.wait_for_selector("#settings-error:not([hidden])")
    assert chat.locator("#settings-error").inner_text() == "That model is not available. Please choose another one."
    assert Conversation.objects.get(owner=user).model_name == DEFAULT_MODEL
    wait_for_true(chat, f"document.getElementById('model-picker').value === {DEFAULT_MODEL!r}")


def test_a_conversation_whose_model_is_gone_says_so_keeps_the_message_and_can_switch(chat, user, upstreams):
    chat.select_option("#model-picker", OTHER_MODEL)  # before the conversation exists
    send(chat, "Hello")
    wait_for_end(chat)
    upstreams[1].models = []
    wait_for_true(chat, "fetch('/api/models').then((r) => r.json()).then((j) => j.models.length === 1)")

    send(chat, "Still there?")
    chat.wait_for_selector("#alert:not([hidden])")
    alert = chat.locator("#alert-text").inner_text()
    wait_for_true(chat, "document.getElementById('composer').value === 'Still there?'")  # given back
    stored = list(Message.objects.filter(conversation__owner=user).values_list("content", flat=True))
    chat.select_option("#model-picker", DEFAULT_MODEL)
    waiting.wait_until(lambda: Conversation.objects.get(owner=user).model == DEFAULT_MODEL, 10,
                       "the picked model to be stored")
    chat.press("#composer", "Enter")
    wait_for_end(chat)

    assert alert.startswith("The model this conversation uses is not available right now.")
    assert stored == ["Hello", "Answered by the other model."]
    assert last_answer(chat).locator(".message-content").inner_text().splitlines()[-1] == "user: Still there?"


def test_saving_one_setting_leaves_the_others_another_tab_saved_meanwhile(chat, user):
    send(chat, "Hello")
    wait_for_end(chat)
    open_settings(chat)  # this tab's panel holds the settings as they were: none
    conversation = Conversation.objects.get(owner=user)
    Conversation.objects.filter(pk=conversation.pk).update(system_prompt=PIRATE)  # saved in another tab

    save_settings(chat, temperature="0.2")

    waiting.wait_until(lambda: Conversation.objects.get(pk=conversation.pk).temperature == 0.2, 10,
                       "the temperature saved")
    assert Conversation.objects.get(pk=conversation.pk).system_prompt == PIRATE


def test_settings_chosen_for_a_new_conversation_outlive_a_creation_that_failed(chat, user):
    save_settings(chat, system_prompt=PIRATE, temperature="1.5")
    chat.route("**/api/conversations", lambda route: route.abort("connectionrefused")
               if route.request.method == "POST" else route.continue_())
    send(chat, "Ahoy")
    chat.wait_for_selector("#alert:not([hidden])")
    chat.unroute("**/api/conversations")

    chat.press("#composer", "Enter")  # the words are still there: sent again
    wait_for_end(chat)

    created = Conversation.objects.get(owner=user)
    assert (created.system_prompt, created.temperature) == (PIRATE, 1.5)


def test_a_system_prompt_past_the_limit_is_refused_whole_with_a_sentence_not_cut(chat, user):
    send(chat, "Hello")
    wait_for_end(chat)
    open_settings(chat)
    pasted = "Rule. " * 700  # 4,200 characters, past the 4,000 a prompt holds
    chat.locator("#settings-system-prompt").fill(pasted)

    chat.click("#settings-panel [type=submit]")

    chat.wait_for_selector("#settings-error:not([hidden])")
    assert "4,000" in chat.locator("#settings-error").inner_text()
    assert chat.locator("#settings-system-prompt").input_value() == pasted
    assert Conversation.objects.get(owner=user).system_prompt == ""


def test_settings_chosen_for_one_new_conversation_are_not_the_next_ones(chat, user):
    save_settings(chat, system_prompt=PIRATE)
    send(chat, "Ahoy")
    wait_for_end(chat)
    chat.click("#new-conversation")
    wait_for_true(chat, "document.querySelector('#conversation-title').textContent === 'New conversation'")

    send(chat, "Hello")
    wait_for_end(chat)

    first, second = Conversation.objects.filter(owner=user).order_by("pk")
    assert (first.system_prompt, second.system_prompt) == (PIRATE, "")
