"""The data model speaks the one vocabulary and keeps what an audit needs."""

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from chatapp.models import Conversation, Generation
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
    assert {c.value for c in CancelledBy} == {"user", "client_gone", "shutdown", "timeout", "admin", "signed_out"}


def test_each_finish_reason_ends_an_answer_in_its_status():
    assert status_for(FinishReason.STOP) == MessageStatus.COMPLETED
    assert status_for(FinishReason.LENGTH) == MessageStatus.TRUNCATED
    assert status_for(FinishReason.CANCELLED) == MessageStatus.STOPPED
    assert status_for("error") == MessageStatus.FAILED


def test_the_migrations_hold_every_change_of_the_models():
    """A field changed in models.py, or a status or finish reason added to the vocabulary (the
    fields' choices), comes with its migration."""
    try:
        call_command("makemigrations", "chatapp", "--check", "--dry-run", verbosity=0)
    except SystemExit:
        pytest.fail("the models changed without a migration: run `manage.py makemigrations chatapp`")


def test_a_soft_deleted_conversation_leaves_the_live_set_but_keeps_its_audit_rows():
    generation = factories.generation()
    conversation = generation.conversation

    conversation.deleted_at = timezone.now()
    conversation.save()

    assert not Conversation.objects.alive().filter(pk=conversation.pk).exists()
    assert Generation.objects.filter(conversation=conversation).count() == 1


def test_a_generation_lasts_from_its_start_to_its_end_and_has_no_duration_while_it_streams():
    started = timezone.now()

    assert Generation(started_at=started, finished_at=started + timedelta(milliseconds=1500)).duration_ms == 1500
    assert Generation(started_at=started).duration_ms is None
