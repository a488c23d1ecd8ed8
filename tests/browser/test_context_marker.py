"""A conversation longer than the model's context, in a browser, with the real model: the oldest
messages drop, the page says where the model's reading starts, and the answer still comes."""

import pytest

from benchmarks.workload import meeting_notes
from chatapp.models import Generation
from harness.page_probes import last_answer, send, wait_for_end, wait_for_true
from tests import factories
from tests.browser.conftest import running_stack, sign_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
MARKER = "#messages .context-marker"


@pytest.fixture(scope="module")
def small_context_stack(django_db_setup, inference_url, tmp_path_factory):
    # A context of 512 tokens: four exchanges of about 700 characters each are far over it.
    with running_stack(inference_url, tmp_path_factory.mktemp("context"), CHAT_TEMPERATURE=0,
                       CHAT_MAX_TOKENS=16, CHAT_CONTEXT_TOKENS=512) as url:
        yield url


def marked_message_id(page) -> str:
    """The id of the message right below the marker."""
    return page.evaluate("document.querySelector('#messages .context-marker').nextElementSibling.dataset.messageId")


def test_the_page_marks_the_first_message_the_model_read_live_and_after_a_reload(page, small_context_stack, user):
    conversation = factories.conversation(owner=user, title="Long notes")
    for turn in range(4):
        factories.message(conversation, content=meeting_notes(turn, 700))
        factories.message(conversation, role="assistant", content=f"A summary of meeting {turn}.")
    first_id = conversation.messages.order_by("pk").first().pk
    sign_in(page, small_context_stack, user)
    page.goto(f"{small_context_stack}/#/c/{conversation.pk}")
    page.wait_for_selector('#messages .message[data-role="assistant"]')
    before = page.locator(MARKER).count()  # a conversation no answer was fitted for yet

    send(page, "What did we decide about the budget?")
    page.wait_for_selector(MARKER)  # while the answer is still being written, or once it ended
    wait_for_end(page)
    wait_for_true(page, "document.querySelector('#messages .context-marker')?.nextElementSibling"
                        "?.dataset.messageId !== ''")
    live_id = marked_message_id(page)
    page.reload()
    page.wait_for_selector(MARKER)
    reloaded_id = marked_message_id(page)

    generation = Generation.objects.get(conversation=conversation)
    assert before == 0
    assert last_answer(page).get_attribute("data-status") in ("completed", "truncated")
    assert generation.context_from_message_id not in (None, first_id)  # the oldest dropped
    assert live_id == reloaded_id == str(generation.context_from_message_id)
    assert page.locator(MARKER).inner_text() == "Earlier messages are beyond what the model can read"
    marked = page.locator(f'#messages .message[data-message-id="{live_id}"]')
    assert marked.get_attribute("data-role") == "user"
    assert page.console_errors == []
