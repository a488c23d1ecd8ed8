"""Background work (Celery; run eagerly in-process when REDIS_URL is unset).

The model's titles are a task of their own, next to the request they make (upstream/titles.py;
celery.py has the worker import it).
"""

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from . import selectors, services
from .runtime import web_process
from .staff import retention, rollups

logger = logging.getLogger(__name__)


@shared_task
def fail_interrupted_streams() -> int:
    """Ends answers whose relay died (a crash, a killed process): its web process is gone
    (chatapp/runtime/web_process.py: seconds), or its heartbeat stopped (a minute).

    A relay refreshes its row's heartbeat on a timer of its own, so an answer that is alive but
    slow (a late first token, a stalled upstream) is never taken for dead; nor is one whose
    process says its relay still runs, its beats refused by a database that was down. What was saved last
    stays; the audit row says the stream was interrupted. A Stop the user pressed before still
    counts as theirs.
    """
    cutoff = timezone.now() - timedelta(seconds=settings.CHAT_STALE_STREAM_SECONDS)
    processes = selectors.relay_processes_live()
    orphaned = selectors.generation_ids_relayed_by(processes=web_process.gone(processes))
    stale = set(selectors.generation_ids_stale(cutoff=cutoff)) - set(orphaned)
    if stale:  # a relay its process still runs missed its beats because the database refused them
        stale -= web_process.relays_running(processes)
    ended = sum(_interrupted(generation_id) for generation_id in orphaned)
    ended += sum(_interrupted(generation_id, unless_heartbeat_since=cutoff) for generation_id in stale)
    web_process.forget(keeping=processes)
    if ended:
        logger.info("ended %d interrupted stream(s)", ended)
    return ended


def _interrupted(generation_id: int, unless_heartbeat_since=None) -> bool:
    """Ends the answer as interrupted; False where it had ended (or, given a time, beat since)."""
    return services.generation_finish(
        generation_id=generation_id, unless_ended=True, unless_heartbeat_since=unless_heartbeat_since,
        outcome=services.Outcome(
            text=None, error_code="interrupted",
            error_message="the stream was interrupted and its relay is gone")) is not None


@shared_task
def purge_expired_stream_claims() -> int:
    """Deletes the places claimed by starts that never ended (services/stream_claims.py: a web
    process that died mid-start): past StreamClaim.LIFETIME they count no more, and the user's
    next start deletes them, but a user who never returns would keep them for ever."""
    purged = services.stream_claims_purge_expired()
    if purged:
        logger.info("purged %d expired stream claim(s)", purged)
    return purged


@shared_task
def purge_expired_records() -> dict:
    """Deletes what is older than CHAT_RETENTION_DAYS (see chatapp/staff/retention.py); off at 0.

    The days about to lose their rows are rolled up first, so the staff charts keep them.
    """
    roll_up_audit_days()
    purged = retention.purge_expired()
    if purged:
        logger.info("purged %d generation(s), %d deleted conversation(s) and their %d message(s)",
                    purged.generations, purged.conversations, purged.messages)
    return vars(purged)


@shared_task
def roll_up_audit_days() -> list[str]:
    """Rolls up every ended day of the audit log without a rollup (yesterday, and any missed)."""
    days = rollups.roll_up_missing_days()
    if days:
        logger.info("rolled up %d day(s) of the audit log, up to %s", len(days), days[-1])
    return [day.isoformat() for day in days]
