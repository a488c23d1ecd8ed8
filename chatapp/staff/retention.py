"""Purges what is older than CHAT_RETENTION_DAYS, a batch per transaction.

What goes (started_at and deleted_at decide, UTC):
- audit rows (Generation) that started before the cutoff and have ended, with their copy of the
  answer (`final_text`): the stored answer text of the audit log;
- conversations their owner deleted before the cutoff, with their messages: a soft-deleted
  conversation is kept only for its audit rows, and once those are gone nothing needs it.
A conversation the user keeps is theirs: its messages stay however old they are.

Each batch is one short DELETE of at most `batch_size` primary keys found through an index, so
no lock is held for long and the page and the relays keep writing meanwhile.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from ..models import Conversation, Generation, Message

BATCH_SIZE = 1000


@dataclass(frozen=True)
class Purged:
    generations: int = 0
    conversations: int = 0
    messages: int = 0

    def __bool__(self) -> bool:
        return bool(self.generations or self.conversations or self.messages)


def cutoff(now: datetime | None = None) -> datetime | None:
    """Rows older than this go; None when retention is off (0 days: keep forever)."""
    days = settings.CHAT_RETENTION_DAYS
    return None if not days else (now or timezone.now()) - timedelta(days=days)


def purge_expired(now: datetime | None = None, batch_size: int = BATCH_SIZE) -> Purged:
    before = cutoff(now)
    if before is None:
        return Purged()
    generations = _delete_in_batches(
        Generation.objects.filter(started_at__lt=before).exclude(status__in=Generation.LIVE_STATUSES),
        batch_size)
    # A conversation with an audit row left (one still streaming) waits for a later round.
    expired = Conversation.objects.filter(deleted_at__lt=before, generations__isnull=True)
    messages = conversations = 0
    for conversation_ids in _id_batches(expired, batch_size):
        messages += _delete_in_batches(Message.objects.filter(conversation_id__in=conversation_ids), batch_size)
        conversations += _delete_in_batches(Conversation.objects.filter(pk__in=conversation_ids), batch_size)
    return Purged(generations=generations, conversations=conversations, messages=messages)


def _id_batches(queryset, batch_size: int):
    """Successive batches of the queryset's primary keys, each read afresh after the last is done."""
    last = 0
    while ids := list(queryset.filter(pk__gt=last).order_by("pk").values_list("pk", flat=True)[:batch_size]):
        yield ids
        last = ids[-1]


def _delete_in_batches(queryset, batch_size: int) -> int:
    deleted = 0
    for ids in _id_batches(queryset, batch_size):
        with transaction.atomic():
            # Plain DELETE by primary key: what refers to these rows is gone already or SET_NULL.
            deleted += queryset.model.objects.filter(pk__in=ids).delete()[1].get(queryset.model._meta.label, 0)
    return deleted
