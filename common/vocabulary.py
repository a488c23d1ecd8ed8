"""The one vocabulary of an answer's life, shared by the engine, the database, the API and the JS.

`frontend/` codes against the same strings; a test compares them.
"""

from enum import StrEnum


class MessageStatus(StrEnum):
    STREAMING = "streaming"
    COMPLETED = "completed"
    STOPPED = "stopped"
    TRUNCATED = "truncated"
    FAILED = "failed"


class FinishReason(StrEnum):
    STOP = "stop"  # end-of-turn token or a stop sequence
    LENGTH = "length"  # hit max_tokens: the answer is truncated
    CONTENT_FILTER = "content_filter"  # only ever reported by some upstreams
    CANCELLED = "cancelled"
    ERROR = "error"


class CancelledBy(StrEnum):
    USER = "user"  # pressed Stop
    CLIENT_GONE = "client_gone"  # the connection closed under us
    SHUTDOWN = "shutdown"  # the server was stopping
    TIMEOUT = "timeout"  # a limit on the request's duration ran out


_STATUS_BY_FINISH_REASON = {
    FinishReason.STOP: MessageStatus.COMPLETED,
    FinishReason.LENGTH: MessageStatus.TRUNCATED,
    FinishReason.CONTENT_FILTER: MessageStatus.STOPPED,
    FinishReason.CANCELLED: MessageStatus.STOPPED,
    FinishReason.ERROR: MessageStatus.FAILED,
}


def status_for(finish_reason: FinishReason) -> MessageStatus:
    """The status an answer ends in, given why its generation finished."""
    return _STATUS_BY_FINISH_REASON[FinishReason(finish_reason)]
