"""The staff room's writes: the daily rollups saved, expired rows purged. The conversation
core's writes are chatapp/services/; the reads these start from are staff/selectors.py.
"""

from collections import Counter
from dataclasses import asdict
from datetime import UTC, datetime

from django.db import transaction

from common.vocabulary import CancelledBy

from ..models import Conversation, DailyRollup, Generation, Message
from . import selectors
from .audit import NO_MODEL, DayTotals


@transaction.atomic
def daily_rollups_save(*, totals: DayTotals, totals_by_model: dict[str, DayTotals]) -> DailyRollup:
    """The day's rollups, every model's and each model's, written over any earlier ones of the
    same day (a model gone from the day loses its row); returns every model's."""
    rollup, _ = DailyRollup.objects.update_or_create(
        day=totals.day, model=DailyRollup.ALL_MODELS, defaults={**_values(totals), "is_split_by_model": True})
    for model, model_totals in totals_by_model.items():
        DailyRollup.objects.update_or_create(day=totals.day, model=model, defaults=_values(model_totals))
    DailyRollup.objects.filter(day=totals.day).exclude(model__in=[DailyRollup.ALL_MODELS, *totals_by_model]).delete()
    return rollup


@transaction.atomic
def late_stop_counted(*, generation: Generation) -> None:
    """A user's Stop of an answer that had ended for want of a reader (`client_gone`), recorded
    after its day was rolled up: the day's rollups count that cancellation as the user's now, as
    rolling the day up again would (a day is rolled up once, and its other rows may be purged)."""
    day = generation.started_at.astimezone(UTC).date()
    models = [DailyRollup.ALL_MODELS, generation.model or NO_MODEL]
    for rollup in DailyRollup.objects.select_for_update().filter(day=day, model__in=models):
        counts = Counter(rollup.cancelled_by)
        if counts[CancelledBy.CLIENT_GONE] > 0:
            counts[CancelledBy.CLIENT_GONE] -= 1
            counts[CancelledBy.USER] += 1
            rollup.cancelled_by = {who: n for who, n in counts.items() if n > 0}
            rollup.save(update_fields=["cancelled_by", "computed_at"])


def _values(totals: DayTotals) -> dict:
    return {name: value for name, value in asdict(totals).items() if name != "day"}


def generations_purge(*, before: datetime, batch_size: int) -> int:
    """Deletes the audit rows that ended and started before `before`; returns how many."""
    return _delete_in_batches(selectors.expired_generations(before=before), batch_size)


def conversations_purge(*, before: datetime, batch_size: int) -> tuple[int, int]:
    """Deletes the conversations deleted before `before` with their messages (see
    selectors.expired_conversations); returns how many conversations and messages."""
    conversations = messages = 0
    for conversation_ids in _id_batches(selectors.expired_conversations(before=before), batch_size):
        messages += _delete_in_batches(Message.objects.filter(conversation_id__in=conversation_ids), batch_size)
        conversations += _delete_in_batches(Conversation.objects.filter(pk__in=conversation_ids), batch_size)
    return conversations, messages


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
