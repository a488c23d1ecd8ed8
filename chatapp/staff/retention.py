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
from django.utils import timezone

from . import services

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
    generations = services.generations_purge(before=before, batch_size=batch_size)
    conversations, messages = services.conversations_purge(before=before, batch_size=batch_size)
    return Purged(generations=generations, conversations=conversations, messages=messages)
