"""What the API answers while the database refuses every session: a 503 the page can explain,
and nothing stored by the refused request."""

import json

import pytest
from asgiref.sync import sync_to_async
from django.db import connection

from chatapp.models import Message
from tests.chat.database_outage import database_refusing_new_sessions, terminate_the_database_threads_backends

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="a server that refuses sessions"),
]


async def test_requests_while_the_database_refuses_sessions_are_told_to_try_again_in_a_moment(api, conversation):
    with database_refusing_new_sessions():
        await sync_to_async(terminate_the_database_threads_backends)()
        listed = await api.get("/api/conversations")
        asked = await api.post(f"/api/conversations/{conversation.pk}/messages",
                               json.dumps({"content": "hello"}), content_type="application/json")
    after = await api.get("/api/conversations")

    for refused in (listed, asked):
        assert (refused.status_code, refused["Content-Type"]) == (503, "application/json")
        assert json.loads(refused.content)["error"]["code"] == "database_unavailable"
        assert int(refused["Retry-After"]) > 0
    assert after.status_code == 200
    assert await Message.objects.filter(conversation=conversation).acount() == 0
