"""GET /api/generations/<id>: where one answer stands, its message, and its audit figures."""

import json
from datetime import datetime

import pytest
from asgiref.sync import sync_to_async

from chatapp.models import Generation
from tests import factories
from tests.chat.streams import read_events

pytestmark = pytest.mark.django_db(transaction=True)


async def answered(api, conversation) -> dict:
    events = await read_events(await api.post(f"/api/conversations/{conversation.pk}/messages",
                                              json.dumps({"content": "go"}), content_type="application/json"))
    generation_id = events[0][1]["generation_id"]
    return (await api.get(f"/api/generations/{generation_id}")).json()


async def test_a_completed_answer_reports_its_status_message_text_length_and_audit_figures(
        api, conversation, upstream):
    upstream.script.chunks = ["Hello", ",", " world", "!"]

    found = await answered(api, conversation)

    generation = await sync_to_async(Generation.objects.get)(conversation=conversation)
    assert found["id"] == generation.pk and found["message_id"] == generation.message_id
    assert (found["status"], found["message_status"]) == ("completed", "completed")
    assert found["text_length"] == len("Hello, world!")
    assert (found["finish_reason"], found["cancelled_by"], found["error_code"]) == ("stop", "", "")
    assert (found["input_tokens"], found["output_tokens"]) == (11, 4)
    assert found["ttft_ms"] > 0 and found["itl_max_ms"] >= found["itl_mean_ms"] >= 0
    created, first, finished = (datetime.fromisoformat(found[key])
                                for key in ("created_at", "first_token_at", "finished_at"))
    assert created <= first <= finished


async def test_a_failed_answer_reports_its_error_code(api, conversation, upstream):
    upstream.script.chunks = ["Half", " an", " answer"]
    upstream.script.crash_after = 2

    found = await answered(api, conversation)

    assert (found["status"], found["message_status"], found["finish_reason"]) == ("failed", "failed", "error")
    assert found["error_code"] == "upstream_disconnected"
    assert found["text_length"] == len("Half an")


async def test_a_streaming_answer_reports_the_text_saved_so_far_and_no_end(api, user):
    def streaming():
        answer = factories.message(factories.conversation(owner=user), role="assistant",
                                   status="streaming", content="Saved só far")
        return factories.generation(answer, final_text="Saved só far")
    generation = await sync_to_async(streaming)()

    found = (await api.get(f"/api/generations/{generation.pk}")).json()

    assert (found["status"], found["message_status"]) == ("streaming", "streaming")
    assert found["text_length"] == 12  # characters (code points), not bytes
    assert found["finished_at"] is None and found["first_token_at"] is None
    assert found["finish_reason"] == "" and found["input_tokens"] is None
