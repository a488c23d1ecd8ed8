"""The relay's connections to the upstream are kept alive between answers, and an upstream closes
one that stayed idle for its own while (5 s: uvicorn's default, which vLLM's server keeps, and
llama.cpp's): a request sent on it just then meets the close, before any answer. That request is
sent again on a fresh connection, not refused as if the upstream could not be reached."""

import pytest
from asgiref.sync import sync_to_async

from chatapp.upstream import models as upstream_models
from tests import factories
from tests.chat.streams import read_events, text_of
from tests.fakes.keepalive_dropper import KeepaliveDropper

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
async def dropper(settings):
    """The upstream: it answers the first request on each connection and drops the second."""
    server = KeepaliveDropper()
    settings.INFERENCE_URL = await server.start()
    upstream_models.forget()
    yield server
    await server.stop()
    upstream_models.forget()


async def test_an_answer_asked_on_a_connection_the_upstream_dropped_as_idle_is_asked_again_on_a_fresh_one(
        api, user, dropper):
    """A message sent as the upstream closed the connection its last answer had used was refused
    (502 upstream_unreachable, "the model could not be reached"): one CI run's browser test waited
    30 s in vain for the first words of an answer in a new conversation."""
    conversation = await sync_to_async(factories.conversation)(owner=user)
    texts = []
    for question in ("Hi", "And again"):
        response = await api.post(f"/api/conversations/{conversation.pk}/messages", {"content": question},
                                  content_type="application/json")
        assert response.status_code == 200, response.content
        texts.append(text_of(await read_events(response)))

    assert texts == ["Hi", "Hi"]
