"""Each API address answers the methods HTTP asks of every server as well as its own: HEAD
wherever it answers GET (the GET's status and headers, no body: a stream's too, never followed),
OPTIONS with what it allows, and a refused method's 405 names them in `Allow` (RFC 9110 9.1,
15.5.6). On a real daphne: Django's test client drops a HEAD's body itself."""

import pytest

from chatapp.models import Generation, Message
from common.vocabulary import MessageStatus
from tests import factories

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]


@pytest.fixture
def streaming_answer(conversation):
    """An answer streaming now (its row says so; nothing will end it): a watch of it follows
    until the browser leaves."""
    factories.message(conversation, content="Hello")
    answer = factories.message(conversation, role=Message.Role.ASSISTANT, status=MessageStatus.STREAMING)
    return factories.generation(answer, status=Generation.Status.STREAMING)


def addresses_of_gets(conversation, streaming_answer) -> list[str]:
    return ["/api/auth/session", "/api/conversations", f"/api/conversations/{conversation.pk}",
            f"/api/conversations/{conversation.pk}/messages", f"/api/generations/{streaming_answer.pk}"]


def test_head_answers_as_get_does_without_the_body(signed_in_daphne, conversation, streaming_answer):
    client = signed_in_daphne
    for address in addresses_of_gets(conversation, streaming_answer):
        get, head = client.get(address), client.head(address)

        assert (head.status_code, head.headers["content-type"]) == (200, get.headers["content-type"]), address
        assert head.content == b"", address
        assert head.headers["content-length"] == str(len(get.content)), address


def test_head_of_an_answers_stream_gives_its_headers_and_does_not_follow_it(signed_in_daphne, streaming_answer):
    head = signed_in_daphne.head(f"/api/generations/{streaming_answer.pk}/events", timeout=10)

    assert (head.status_code, head.headers["content-type"]) == (200, "text/event-stream")
    assert head.content == b""
    assert "content-length" not in head.headers  # a stream has no length to give


def test_head_of_another_users_answer_is_the_same_404_as_its_get(signed_in_daphne, other_user):
    others = factories.generation(factories.message(factories.conversation(owner=other_user),
                                                    role=Message.Role.ASSISTANT))

    head = signed_in_daphne.head(f"/api/generations/{others.pk}")

    assert (head.status_code, head.headers["content-type"]) == (404, "application/json")


def test_options_names_the_methods_an_address_allows(signed_in_daphne, conversation):
    client = signed_in_daphne

    listing = client.options("/api/conversations")
    one = client.options(f"/api/conversations/{conversation.pk}")
    stop = client.options("/api/generations/1/stop")

    assert listing.status_code == 200 and listing.content == b""
    assert listing.headers["allow"] == "GET, HEAD, OPTIONS, POST"
    assert one.headers["allow"] == "DELETE, GET, HEAD, OPTIONS, PATCH"
    assert stop.headers["allow"] == "OPTIONS, POST"


def test_a_refused_method_is_answered_405_naming_the_allowed_ones(signed_in_daphne, conversation):
    client = signed_in_daphne

    put = client.put(f"/api/conversations/{conversation.pk}/messages", json={})
    get_of_a_post = client.get(f"/api/conversations/{conversation.pk}/regenerate")

    assert (put.status_code, put.json()["error"]["code"]) == (405, "method_not_allowed")
    assert put.headers["allow"] == "GET, HEAD, OPTIONS, POST"
    assert (get_of_a_post.status_code, get_of_a_post.headers["allow"]) == (405, "OPTIONS, POST")
    assert Message.objects.filter(conversation=conversation).count() == 0
