"""The data model speaks the one vocabulary and keeps what an audit needs."""

from datetime import timedelta

import pytest
from django.db import IntegrityError
from django.utils import timezone

from chatapp.models import Conversation, Generation, Message
from common.vocabulary import CancelledBy, FinishReason, MessageStatus, status_for
from tests import factories

pytestmark = pytest.mark.django_db


def test_the_vocabulary_is_the_one_the_product_promises():
    assert [s.value for s in MessageStatus] == [
        "streaming", "completed", "stopped", "truncated", "failed"
    ]
    assert {r.value for r in FinishReason} == {
        "stop", "length", "content_filter", "cancelled", "error"
    }
    assert {c.value for c in CancelledBy} == {"user", "client_gone", "shutdown", "timeout", "admin"}


def test_each_finish_reason_ends_an_answer_in_its_status():
    assert status_for(FinishReason.STOP) == MessageStatus.COMPLETED
    assert status_for(FinishReason.LENGTH) == MessageStatus.TRUNCATED
    assert status_for(FinishReason.CANCELLED) == MessageStatus.STOPPED
    assert status_for("error") == MessageStatus.FAILED


def test_model_fields_accept_exactly_the_vocabulary():
    status_choices = {value for value, _ in Message._meta.get_field("status").choices}
    reason_choices = {value for value, _ in Generation._meta.get_field("finish_reason").choices}
    cancel_choices = {value for value, _ in Generation._meta.get_field("cancelled_by").choices}

    assert status_choices == set(MessageStatus)
    assert reason_choices == set(FinishReason)
    assert cancel_choices == set(CancelledBy)


def test_a_soft_deleted_conversation_leaves_the_live_set_but_keeps_its_audit_rows():
    generation = factories.generation()
    conversation = generation.conversation

    conversation.deleted_at = timezone.now()
    conversation.save()

    assert not Conversation.objects.alive().filter(pk=conversation.pk).exists()
    assert Generation.objects.filter(conversation=conversation).count() == 1


def test_a_generation_gets_a_unique_request_id_and_measures_its_duration():
    first = factories.generation()
    second = factories.generation()
    first.finished_at = first.started_at + timedelta(milliseconds=1500)

    assert first.request_id != second.request_id
    assert first.duration_ms == pytest.approx(1500)
    assert second.duration_ms is None


def test_two_generations_cannot_share_a_request_id():
    first = factories.generation()

    with pytest.raises(IntegrityError):
        factories.generation(request_id=first.request_id)


def test_a_finished_generation_keeps_every_audit_field():
    generation = factories.generation(
        sampling={"temperature": 0.7, "top_p": 0.9, "max_tokens": 256},
        prompt_messages=3,
        input_tokens=42,
        output_tokens=7,
        ttft_ms=120.5,
        itl_mean_ms=80.0,
        itl_max_ms=140.0,
        finish_reason=FinishReason.CANCELLED,
        cancelled_by=CancelledBy.USER,
        final_text="Hello th",
    )

    stored = Generation.objects.get(pk=generation.pk)

    assert stored.sampling["temperature"] == 0.7
    assert (stored.input_tokens, stored.output_tokens, stored.prompt_messages) == (42, 7, 3)
    assert stored.finish_reason == "cancelled" and stored.cancelled_by == "user"
    assert stored.final_text == "Hello th"
