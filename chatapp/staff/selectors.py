"""The staff room's reads. They cross every owner, so only the staff pages and the upkeep tasks
call them; the conversation core's reads, scoped to their owner, are chatapp/selectors.py.
"""

from datetime import date, datetime
from types import SimpleNamespace

from django.contrib import auth
from django.db import connection
from django.db.models import Min
from django.db.models.functions import Length
from django.utils import timezone

from ..errors import not_found
from ..models import Conversation, DailyRollup, Generation
from . import permissions
from .audit import FIELDS


def streams_now() -> list[dict]:
    """Every live generation, oldest first, with its user and conversation, in one query."""
    rows = (Generation.objects.filter(status__in=Generation.LIVE_STATUSES)
            .annotate(chars_so_far=Length("final_text"))
            .order_by("started_at", "pk")
            .values("pk", "status", "started_at", "model", "chars_so_far", "user__username",
                    "conversation_id", "conversation__title", "message_id"))
    now = timezone.now()
    return [{"generation_id": row["pk"], "status": row["status"], "model": row["model"],
             "username": row["user__username"], "conversation_id": row["conversation_id"],
             "conversation_title": row["conversation__title"], "message_id": row["message_id"],
             "started_at": row["started_at"].isoformat(),
             "age_s": round((now - row["started_at"]).total_seconds(), 1),
             "chars_so_far": row["chars_so_far"]}
            for row in rows]


def may_still_review(*, user_id: int, session) -> bool:
    """The user is still signed in with `session` and still active staff who may review answers:
    what a live view that stays open checks again at each event. The session is read afresh
    and checked as every request's is (django.contrib.auth.get_user): not signed out, not
    expired, its password not changed since; the user too (permissions are cached on one)."""
    fresh = SimpleNamespace(session=type(session)(session_key=session.session_key))
    user = auth.get_user(fresh)
    return user.pk == user_id and permissions.may(user, permissions.REVIEW_ANSWERS)


def models_in_the_log() -> list[str]:
    """Every model the audit log names, in order: a walk down the model index, one look-up per
    model, where DISTINCT reads every row of a log that only grows (0.2 s at 300,000 rows)."""
    table = connection.ops.quote_name(Generation._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"""
            WITH RECURSIVE walk (model) AS (
                SELECT MIN(model) FROM {table}
                UNION ALL
                SELECT (SELECT MIN(model) FROM {table} WHERE model > walk.model) FROM walk
                WHERE walk.model IS NOT NULL)
            SELECT model FROM walk WHERE model IS NOT NULL""")
        return [model for (model,) in cursor.fetchall()]


def generation_of_anyone(*, generation_id: int) -> Generation:
    try:
        return Generation.objects.get(pk=generation_id)
    except Generation.DoesNotExist:
        raise not_found("generation") from None


# --- the audit log, by the time its answers started ---
def first_started_at() -> datetime | None:
    return Generation.objects.aggregate(first=Min("started_at"))["first"]


def audit_rows(*, start: datetime, end: datetime) -> list[tuple]:
    """The audit figures (audit.FIELDS) of the answers that started in [start, end)."""
    return list(Generation.objects.filter(started_at__gte=start, started_at__lt=end).order_by()
                .values_list(*FIELDS))


def generations_started(*, start: datetime, end: datetime) -> int:
    return Generation.objects.filter(started_at__gte=start, started_at__lt=end).count()


def any_streaming(*, start: datetime, end: datetime) -> bool:
    """Whether an answer that started in [start, end) is streaming still."""
    return Generation.objects.filter(started_at__gte=start, started_at__lt=end,
                                     status__in=Generation.LIVE_STATUSES).exists()


def rollups_of(*, first: date, last: date, model: str | None = None) -> list[DailyRollup]:
    """The days' rollups: of one model (DailyRollup.ALL_MODELS: every model's row), or all of them."""
    rollups = DailyRollup.objects.filter(day__gte=first, day__lte=last)
    return list(rollups if model is None else rollups.filter(model=model))


# --- what retention purges ---
def expired_generations(*, before: datetime):
    """The audit rows that started before `before` and have ended."""
    return Generation.objects.filter(started_at__lt=before).exclude(status__in=Generation.LIVE_STATUSES)


def expired_conversations(*, before: datetime):
    """The conversations their owner deleted before `before`. One with an audit row left (one
    still streaming) waits for a later round."""
    return Conversation.objects.filter(deleted_at__lt=before, generations__isnull=True)
