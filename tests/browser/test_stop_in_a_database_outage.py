"""A Stop pressed while the database is down, in a real browser through nginx: the server answers
503 (database_unavailable), and the page sends the Stop again, with the same count, until the
server takes it once the database is back, so that the answer is stored as the user saw it end."""

import pytest

from chatapp.models import Message
from harness import waiting
from harness.database_administrator import DatabaseAdministrator
from harness.page_probes import last_answer, send, wait_for_handled, wait_for_true
from tests import servers
from tests.browser.conftest import sign_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# 30 s at 50 ms a word: still being written when the database comes back.
LONG_ANSWER = [f"w{i} " for i in range(600)]


def test_a_stop_refused_while_the_database_is_down_is_sent_again_until_taken_and_keeps_what_was_seen(
        page, stack_with_fake_upstream, user, upstream):
    upstream.script.chunks, upstream.script.interval_s = LONG_ANSWER, 0.05
    sign_in(page, stack_with_fake_upstream, user)
    stop_answers = []
    page.on("response", lambda response: response.url.endswith("/stop") and stop_answers.append(response.status))
    send(page, "count slowly")
    wait_for_true(page, "window.chatappStats.paints >= 3")

    with DatabaseAdministrator(servers.shared_database_url()) as administrator:
        administrator.refuse_sessions()
        administrator.end_sessions()  # every web process's sessions, as a restart ends them
        page.click("#stop")
        wait_for_handled(page, lambda: 503 in stop_answers, "the Stop refused while the database is down")
        seen = last_answer(page).locator(".message-content").inner_text()
        administrator.allow_sessions()

    wait_for_handled(page, lambda: 202 in stop_answers, "the Stop sent again and taken", timeout_s=30)
    answer = _stored_end()
    generation = answer.generations.get()
    assert stop_answers[0] == 503 and stop_answers[-1] == 202
    assert (generation.status, generation.cancelled_by) == ("stopped", "user")
    assert answer.content.strip() == seen.strip()


def _stored_end() -> Message:
    def ended():
        answer = Message.objects.filter(role="assistant").last()
        return answer if answer is not None and answer.status != "streaming" else None
    waiting.wait_until(ended, 30, "the answer's final write")
    return ended()
