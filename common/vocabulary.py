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


class GenerationStatus(StrEnum):
    """Where one generation (its audit row) stands; the message shows the same words.

    `stop_requested` is a Stop recorded while the relay still streams; the final write turns
    it into `stopped`. The last four are final: nothing leaves them.
    """

    STREAMING = "streaming"
    STOP_REQUESTED = "stop_requested"
    COMPLETED = "completed"
    STOPPED = "stopped"
    TRUNCATED = "truncated"
    FAILED = "failed"

    @property
    def is_final(self) -> bool:
        return self not in (GenerationStatus.STREAMING, GenerationStatus.STOP_REQUESTED)

    @property
    def message_status(self) -> MessageStatus:
        """What the answer's message shows: a Stop not yet applied still streams."""
        if self is GenerationStatus.STOP_REQUESTED:
            return MessageStatus.STREAMING
        return MessageStatus(self.value)


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
    ADMIN = "admin"  # staff pressed Stop on the live view
    SIGNED_OUT = "signed_out"  # the session that asked it ended (a sign-out, a password change elsewhere)


_STATUS_BY_FINISH_REASON = {
    FinishReason.STOP: MessageStatus.COMPLETED,
    FinishReason.LENGTH: MessageStatus.TRUNCATED,
    FinishReason.CONTENT_FILTER: MessageStatus.STOPPED,
    FinishReason.CANCELLED: MessageStatus.STOPPED,
    FinishReason.ERROR: MessageStatus.FAILED,
}


def status_for(finish_reason: FinishReason) -> GenerationStatus:
    """The final status of a generation, given why it finished."""
    return GenerationStatus(_STATUS_BY_FINISH_REASON[FinishReason(finish_reason)].value)
