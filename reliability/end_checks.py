"""What must hold once a suite's load has ended: no answer left streaming in the database or
in the engine, and every stored answer consistent with what its client saw.
"""

import time
from collections import Counter
from dataclasses import dataclass, field

from .chat_client import Answer, Outcome
from .stack_under_test import StackUnderTest


def _poll(read, is_settled, timeout_s: float):
    """Reads until `is_settled(value)` or the deadline; returns the last value read."""
    deadline = time.monotonic() + timeout_s
    value = read()
    while not is_settled(value) and time.monotonic() < deadline:
        time.sleep(0.5)
        value = read()
    return value


def live_rows(timeout_s: float) -> dict[str, int]:
    """Generations and messages still not final, once they had `timeout_s` to settle (a relay
    writes its final row just after the client's stream ended)."""
    from django.db import connection

    from chatapp.models import Generation, Message
    from common.vocabulary import MessageStatus

    def read() -> dict[str, int]:
        return {
            "generations": Generation.objects.filter(status__in=Generation.LIVE_STATUSES).count(),
            "messages": Message.objects.filter(status=MessageStatus.STREAMING).count(),
        }

    try:
        return _poll(read, lambda left: not any(left.values()), timeout_s)
    finally:
        connection.close()


ENGINE_GAUGES = ("inference_running_sequences", "inference_waiting_sequences")


def engine_sequences(stack: StackUnderTest, timeout_s: float) -> dict[str, float]:
    """The engine's running and waiting sequences once they had `timeout_s` to drain."""
    def read() -> dict[str, float]:
        metrics = stack.engine_metrics()
        return {name: metrics.get(name, float("nan")) for name in ENGINE_GAUGES}

    return _poll(read, lambda gauges: not any(gauges.values()), timeout_s)


@dataclass
class StoredVsSeen:
    """Each answer the server started, compared with its stored row."""

    checked: int = 0
    mismatches: list[str] = field(default_factory=list)
    # Closed answers: stored text may run past what the client read (bytes in flight).
    closed_excess_chars: list[int] = field(default_factory=list)
    statuses: Counter = field(default_factory=Counter)  # (outcome, status, cancelled_by)


def stored_vs_seen(answers: list[Answer]) -> StoredVsSeen:
    from django.db import connection

    from chatapp.models import Generation

    started = {a.generation_id: a for a in answers if a.generation_id is not None}
    rows = Generation.objects.filter(pk__in=started).select_related("message")
    result = StoredVsSeen()
    try:
        for row in rows:
            answer = started[row.pk]
            result.checked += 1
            result.statuses[(answer.outcome.value, row.status, row.cancelled_by or "-")] += 1
            problem = _mismatch(answer, row)
            if problem:
                result.mismatches.append(f"generation {row.pk}: {problem}")
            if answer.outcome is Outcome.CLOSED and row.message.content.startswith(answer.seen):
                result.closed_excess_chars.append(len(row.message.content) - answer.seen_chars)
        missing = set(started) - {row.pk for row in rows}
        result.mismatches += [f"generation {pk}: no row" for pk in sorted(missing)]
    finally:
        connection.close()
    return result


def _mismatch(answer: Answer, row) -> str:
    """Why the row disagrees with the client, or '' when it agrees."""
    stored = row.message.content if row.message else None
    if stored is None:
        return "no message"
    if row.final_text != stored:
        return "the generation's final text differs from its message"
    if answer.outcome is Outcome.CLOSED:
        if not stored.startswith(answer.seen):
            return f"stored text does not start with the {answer.seen_chars} code points seen"
        if row.status == "stopped" and row.cancelled_by != "client_gone":
            return f"closed, but cancelled_by {row.cancelled_by!r}"
        return ""
    if stored != answer.seen:
        return f"stored {len(stored)} code points, the client saw {answer.seen_chars}"
    if answer.outcome is Outcome.STOPPED and (row.status, row.cancelled_by) != ("stopped", "user"):
        return f"stopped by the user, but stored as {row.status} / {row.cancelled_by!r}"
    if answer.outcome is Outcome.FINISHED and row.status != answer.done.get("status"):
        return f"`done` said {answer.done.get('status')}, the row says {row.status}"
    return ""
