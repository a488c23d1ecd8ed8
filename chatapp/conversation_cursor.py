"""A place in the conversation list, as the API hands it out and takes it back: the cursor.

The list's order is (updated_at, id), newest first, and a cursor names a conversation's place
in it by those two values as they were read, not by the row: a conversation deleted or moved
to the top since still leaves its place, and the conversations after it are the same. The
client sends it back as it came (docs/api.md calls it opaque): what it holds may change.
"""

from datetime import UTC, datetime, timedelta

from . import request_input

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_MAX_MICROSECONDS = (datetime.max.replace(tzinfo=UTC) - _EPOCH) // _MICROSECOND


def cursor_of(conversation) -> str:
    """The cursor of `conversation`'s place: its updated_at in microseconds since 1970, and its id."""
    return f"{(conversation.updated_at - _EPOCH) // _MICROSECOND}.{conversation.pk}"


def place_of(cursor: str) -> tuple[datetime, int]:
    """The (updated_at, id) a cursor names; ValueError for one this module did not write."""
    microseconds, dot, conversation_id = cursor.partition(".")
    moment = request_input.count(microseconds, _MAX_MICROSECONDS)
    row = request_input.count(conversation_id, request_input.MAX_ID)
    if not dot or moment is None or row is None:
        raise ValueError(f"not a cursor of the conversation list: {cursor[:40]!r}")
    return _EPOCH + moment * _MICROSECOND, row
