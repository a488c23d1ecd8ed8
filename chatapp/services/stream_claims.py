"""A user's places among the answers that may stream at once (CHAT_MAX_STREAMS_PER_USER), taken
before anything goes upstream.

The limit used to be checked by the plan's read and again under the user's lock at the write,
which runs once the upstream took the request: two starts at once for the last place both read it
free and both opened their upstream request, and the second was refused only at its write. Now a
start claims its place right after its plan, one claim of a user at a time: a second start finds
the first's claim (or its generation, the claim's successor at the write) and is refused first.
"""

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from .. import selectors
from ..errors import STREAMS_RETRY_AFTER_SECONDS, ApiError
from ..models import StreamClaim

# The claims' own lock space (pg_advisory_xact_lock's first key), with the user's id as the second.
_CLAIMS_LOCK_SPACE = 0x53545245  # "STRE"


def refuse_when_full(*, user) -> None:
    """Raises 429 when the user's answers streaming or starting fill their places."""
    if selectors.streams_open(user=user) >= settings.CHAT_MAX_STREAMS_PER_USER:
        raise ApiError(429, "too_many_streams",
                       f"at most {settings.CHAT_MAX_STREAMS_PER_USER} answers may stream at once",
                       retry_after_s=STREAMS_RETRY_AFTER_SECONDS)


@transaction.atomic
def stream_claim(*, user, request_id) -> None:
    """Takes one of the user's places for the answer `request_id` starting, or raises 429.

    Claims of one user are taken one at a time, under a lock of their own rather than the user's
    row, which an answer's write holds while its upstream request is already open. A write turns
    its claim into its generation in one transaction, and both are counted in one statement, so
    a claim taken meanwhile counts it once."""
    one_claim_at_a_time(user.pk)
    if connection.vendor == "postgresql":
        # Its commit need not wait for the disk (half of the claim's time, in front of the first
        # token): a claim a crash loses frees its place, as its lifetime would, and the
        # generation that holds the place after it is written as every row is.
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit TO OFF")
    refuse_when_full(user=user)
    StreamClaim.objects.create(request_id=request_id, user=user)


def stream_claim_release(*, user, request_id) -> None:
    """The place of an answer whose rows are written (its generation holds it from then on), or
    of a start refused or abandoned before that: free again at once. The user's claims that
    expired (left by a web process that died mid-start) go in the same statement."""
    expired = Q(claimed_at__lt=timezone.now() - StreamClaim.LIFETIME)
    StreamClaim.objects.filter(Q(request_id=request_id) | expired, user=user).delete()


def stream_claims_purge_expired() -> int:
    """Deletes every user's claims past their lifetime, in one statement (by `claimed_at`, its
    index), and says how many: the claims a web process that died mid-start left of a user who
    never starts another answer, which stream_claim_release would never reach. The periodic
    task's (tasks.purge_expired_stream_claims)."""
    deleted, _ = StreamClaim.objects.filter(claimed_at__lt=timezone.now() - StreamClaim.LIFETIME).delete()
    return deleted


def one_claim_at_a_time(user_id: int) -> None:
    """In a transaction: the user's claims wait for it to end."""
    # SQLite has no such locks: every transaction of ours there takes the file's write lock.
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_CLAIMS_LOCK_SPACE, user_id & 0x7FFFFFFF])
