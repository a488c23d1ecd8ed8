"""What a request may carry: a JSON object body and query values that every later layer can hold.

Checked once here for every endpoint, so that no view, service or database meets a value it
cannot store: PostgreSQL refuses a NUL in text and a lone surrogate cannot be encoded as
UTF-8 (each was a 500), NaN and Infinity are not JSON, and nesting deep enough to exhaust
Python's recursion is no chat message.
"""

import re

from common import strict_json

from .errors import ApiError

MAX_DEPTH = 32
# A count or an offset of an answer's characters: a Generation's stop_seen_chars is a PostgreSQL
# integer, and no answer comes near this many.
MAX_CHARS = 2**31 - 1
MAX_ID = 2**63 - 1  # a row's id (BigAutoField)
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_ABSENT = object()


def json_object(raw: bytes) -> dict:
    """The body as a dict whose every string (keys too) is storable text; else ApiError 400."""
    try:
        body = strict_json.loads(raw or b"{}")
    except strict_json.InvalidJson as error:
        raise ApiError(400, "invalid_json", str(error)) from error
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_json", "the body must be a JSON object")
    _check_tree(body)
    return body


def _check_tree(root) -> None:
    """Walks the tree with a stack of its own (deep trees must not recurse here either)."""
    pending = [(root, 1)]
    while pending:
        value, depth = pending.pop()
        if depth > MAX_DEPTH:
            raise ApiError(400, "invalid_json", f"the body nests deeper than {MAX_DEPTH} levels")
        if isinstance(value, dict):
            for key in value:
                check_text(key, "a key")
            pending.extend((item, depth + 1) for item in value.values())
        elif isinstance(value, list):
            pending.extend((item, depth + 1) for item in value)
        elif isinstance(value, str):
            check_text(value, "a string")


def check_text(value: str, what: str) -> str:
    if _UNSTORABLE.search(value):
        raise ApiError(400, "invalid_value", f"{what} holds a NUL character or a lone surrogate")
    return value


def storable(text: str) -> str:
    """`text` with each character no database stores replaced by U+FFFD, as a decoder replaces
    a byte it cannot read: for text we did not check at the door (a model's answer), which
    keeps its length, so that every offset into it holds."""
    return _UNSTORABLE.sub("\ufffd", text)


def count(text: str, maximum: int = MAX_CHARS) -> int | None:
    """`text` as a count from 0 to `maximum` written in ASCII digits, else None. Its length is
    checked first: past 4,300 digits int() raises instead of converting (CVE-2020-10735)."""
    digits = text.lstrip("0") or "0"
    if not (text.isascii() and text.isdigit()) or len(digits) > len(str(maximum)):
        return None
    value = int(digits)
    return value if value <= maximum else None


def text(body: dict, name: str, default=_ABSENT) -> str | None:
    """The string field `name`; absent, it is `default` (required when none is given); any
    non-string, null included, is refused rather than stored as its str()."""
    value = body.get(name, _ABSENT)
    if value is _ABSENT and default is not _ABSENT:
        return default
    if not isinstance(value, str):
        raise ApiError(400, "invalid_value", f"{name} must be a string")
    return value


def row_id(body: dict, name: str) -> int | None:
    """The optional field `name`, a row's id; absent or null, None."""
    return _whole_number(body, name, 1, MAX_ID, "the id of a message: a whole number from 1")


def char_count(body: dict, name: str) -> int | None:
    """The optional field `name`, a number of characters (code points); absent or null, None."""
    return _whole_number(body, name, 0, MAX_CHARS, f"an integer from 0 to {MAX_CHARS}")


def _whole_number(body: dict, name: str, least: int, most: int, what: str) -> int | None:
    """A JSON integer (not true or false, which Python counts as 1 and 0) from `least` to `most`."""
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
        raise ApiError(400, "invalid_value", f"{name} must be {what}")
    return value


def query_text(request, name: str, default: str = "") -> str:
    """A query-string value, held to the same rule as a body's strings."""
    return check_text(request.GET.get(name, default), f"the query parameter {name}")
