"""A user's own account: the one write a user makes to it, a new password."""

from django.contrib.auth import password_validation


def user_password_change(*, user, new_password: str) -> None:
    """Stores `new_password` once AUTH_PASSWORD_VALIDATORS take it (else their ValidationError,
    each message written for the user). Every session of the user holds a hash of the old
    password, which Django compares at each request (auth.get_user): each ends at its next one,
    unless the caller keeps its own with update_session_auth_hash. Their open streams are told
    once the new hash is saved (streaming/session_end_signals.py)."""
    password_validation.validate_password(new_password, user)
    user.set_password(new_password)
    user.save(update_fields=["password"])
