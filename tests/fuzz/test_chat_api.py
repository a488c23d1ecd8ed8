"""Fuzzing every chat API endpoint on a real daphne, on the test database, with the real model.

Each endpoint gets requests generated from docs/openapi-chat.yaml and the hostile bodies of
tests/fuzz/hostile.py, signed in with the session cookie and X-CSRFToken. No answer may be a
5xx; a refused (4xx) request may store no conversation, message or generation; and the app and
its inference service answer their health checks afterwards.
"""

from dataclasses import dataclass

import httpx2
import pytest
import requests
from hypothesis import given

from chatapp.models import Conversation, Generation, Message
from common.vocabulary import FinishReason, MessageStatus
from tests import factories, servers
from tests.fuzz import hostile
from tests.fuzz.conftest import fuzz_settings
from tests.fuzz.operations import cases, described, operations
from tests.fuzz.tally import RUN, assert_none_found, exchange

pytestmark = [pytest.mark.fuzz, pytest.mark.django_db(transaction=True)]

OPERATIONS = operations("openapi-chat.yaml")
# A conversation's fields (docs/api.md, "A conversation's settings").
SETTINGS = ("title", "system_prompt", "model", "temperature", "top_p")
# Bodies with a slot for a hostile value, per endpoint that reads one ("{...}" filled in per test).
BODY_TEMPLATES = {
    "POST /api/auth/login": {"username": {"username": hostile.SLOT, "password": "x"},
                             "password": {"username": "x", "password": hostile.SLOT}},
    "POST /api/auth/password": {"old_password": {"old_password": hostile.SLOT, "new_password": "x"},
                                "new_password": {"old_password": "x", "new_password": hostile.SLOT}},
    "POST /api/conversations": {name: {name: hostile.SLOT} for name in SETTINGS},
    "PATCH /api/conversations/{conversation_id}": {name: {name: hostile.SLOT} for name in SETTINGS},
    "POST /api/conversations/{conversation_id}/regenerate": {"model": {"model": hostile.SLOT}},
    "POST /api/conversations/{conversation_id}/messages": {"content": {"content": hostile.SLOT}},
    "POST /api/messages/{message_id}/edit": {"content": {"content": hostile.SLOT}},
    "POST /api/generations/{generation_id}/stop": {"seen_chars": {"seen_chars": hostile.SLOT}},
    "POST /api/generations/{generation_id}/recover": {
        "pieces": {"pieces": hostile.SLOT},
        "offset": {"pieces": [{"offset": hostile.SLOT, "text": "a", "proof": "0" * 32}]},
        "text": {"pieces": [{"offset": 0, "text": hostile.SLOT, "proof": "0" * 32}]},
        "proof": {"pieces": [{"offset": 0, "text": "a", "proof": hostile.SLOT}]}},
}
HOSTILE_QUERIES = ["q=a%00b", "q=%ED%A0%80", "page=2", "after=18446744073709551616.1", "after=-1.-1",
                   "after=NaN", "after=1.%00", "after=" + "9" * 5000 + ".1", "after=253402300800000000.1"]
HOSTILE_IDS = [2**31, 2**63, 2**64]
# A message page's cursor and size, beyond what an id or a page may be.
HOSTILE_PAGE_QUERIES = ["before=18446744073709551616", "before=9223372036854775808", "before=-1", "before=%00",
                        "limit=NaN", "limit=0", "limit=" + "9" * 5000]


@pytest.fixture(scope="module")
def app_url(django_db_setup, real_model_url):
    # Four tokens an answer: the fuzz is about the requests, and streamed answers stay quick.
    # Its hundreds of failed sign-ins would trip the login limit for every later test's sign-in.
    env = {"INFERENCE_URL": real_model_url, "CHAT_MAX_TOKENS": "4", "CHAT_LOGIN_ATTEMPTS": "1000000",
           "CHAT_LOGIN_SPREAD_ATTEMPTS": "1000000"}
    with servers.daphne_on(servers.shared_database_url(), env=env) as url:
        yield url


@dataclass
class SignedIn:
    """A user signed in to the app, with rows of their own and someone else's to aim at."""

    base_url: str
    session: requests.Session
    known_ids: dict[str, list[int]]

    def send(self, method: str, path: str, body: bytes | None = None) -> requests.Response:
        headers = {"X-CSRFToken": self.session.cookies["csrftoken"], "Content-Type": "application/json"}
        return self.session.request(method, self.base_url + path, data=body, headers=headers, timeout=120)

    def path(self, template: str) -> str:
        return template.format(**{name: ids[0] for name, ids in self.known_ids.items()})


def answered(conversation, status: str, finish_reason: str):
    """The conversation's question, its answer with `status`, and the answer's generation."""
    question = factories.message(conversation, content="Hello")
    answer = factories.message(conversation, role=Message.Role.ASSISTANT, content="Hi there", status=status)
    return question, answer, factories.generation(answer, finish_reason=finish_reason, final_text="Hi there",
                                                  finished_at=answer.created_at)


@pytest.fixture
def signed_in(app_url, transactional_db):
    user = factories.user()
    completed, truncated = factories.conversation(owner=user), factories.conversation(owner=user)
    completed_rows = answered(completed, MessageStatus.COMPLETED, FinishReason.STOP)
    truncated_rows = answered(truncated, MessageStatus.TRUNCATED, FinishReason.LENGTH)
    others = factories.conversation()
    others_rows = answered(others, MessageStatus.COMPLETED, FinishReason.STOP)
    # The first of each is the one hostile bodies aim at: a row the endpoint acts on.
    known_ids = {
        "conversation_id": [completed.pk, truncated.pk, others.pk],
        "message_id": [completed_rows[0].pk, truncated_rows[1].pk, others_rows[0].pk],
        "generation_id": [completed_rows[2].pk, truncated_rows[2].pk, others_rows[2].pk],
    }
    with httpx2.Client(base_url=app_url, timeout=30) as client:
        servers.sign_in(client, user)
        session = requests.Session()
        for cookie in client.cookies.jar:  # with the server's domain: a cookie it sets again replaces
            session.cookies.set_cookie(cookie)  # the old one, as in a browser (not a second of the name)
    yield SignedIn(app_url, session, known_ids)
    session.close()


def stored_rows() -> tuple[int, int, int]:
    return tuple(model._base_manager.count() for model in (Conversation, Message, Generation))


@pytest.mark.parametrize("endpoint", OPERATIONS)
def test_generated_requests_get_no_server_error_and_refused_ones_store_nothing(endpoint, signed_in):
    operation = OPERATIONS[endpoint]

    findings = []

    @fuzz_settings()
    @given(case=cases(operation, signed_in.known_ids))
    def send_one(case):
        findings.append(exchange(
            endpoint, "generated", described(case), stored_rows=stored_rows, send=lambda: case.call(
                base_url=signed_in.base_url, session=signed_in.session, timeout=120,
                headers={"X-CSRFToken": signed_in.session.cookies["csrftoken"]})))

    send_one()

    assert findings  # the fuzz did run
    assert_none_found(findings)


@pytest.mark.parametrize("endpoint", BODY_TEMPLATES)
def test_hostile_bodies_get_no_server_error_and_refused_ones_store_nothing(endpoint, signed_in):
    method, template = endpoint.split(" ")
    path = signed_in.path(template)

    findings = [exchange(endpoint, what, f"{method} {path} with {what}", stored_rows=stored_rows,
                         send=lambda body=body: signed_in.send(method, path, body))
                for what, body in hostile.bodies(BODY_TEMPLATES[endpoint])]

    assert_none_found(findings)


def test_hostile_queries_and_ids_get_no_server_error(signed_in):
    requests_sent = [("GET /api/conversations", f"/api/conversations?{query}") for query in HOSTILE_QUERIES]
    messages = "GET /api/conversations/{conversation_id}/messages"
    requests_sent += [(messages, signed_in.path(messages.split(" ")[1]) + f"?{query}") for query in HOSTILE_PAGE_QUERIES]
    requests_sent += [(endpoint, endpoint.split(" ")[1].format(conversation_id=big, message_id=big,
                                                              generation_id=big))
                      for endpoint in OPERATIONS if "{" in endpoint for big in HOSTILE_IDS]

    findings = [exchange(endpoint, path, f"{endpoint.split(' ')[0]} {path}", stored_rows=stored_rows,
                         send=lambda endpoint=endpoint, path=path: signed_in.send(endpoint.split(" ")[0], path))
                for endpoint, path in requests_sent]

    assert_none_found(findings)


def test_the_app_and_its_inference_service_are_healthy_after_the_fuzz(app_url, real_model_url):
    statuses = {"chat /healthz": httpx2.get(app_url + "/healthz").status_code,
                "inference /health": httpx2.get(real_model_url + "/health").status_code}
    RUN.health.update(statuses)

    assert statuses == {"chat /healthz": 200, "inference /health": 200}
