"""Settings for the test run: the real ones, with a throwaway secret when none is set."""

import os
import secrets

os.environ.setdefault("DJANGO_SECRET_KEY", f"test-only-{secrets.token_urlsafe(32)}")

from chatapp.settings import *  # noqa: E402,F403

# Off unless a test asks for them: a title request is one more upstream request, which the
# tests that count the upstream's requests do not expect. A server a test starts is told so.
CHAT_MODEL_TITLES = os.environ.get("TEST_CHAT_MODEL_TITLES") == "1"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast; tests only
# A departed page's answer ends at once unless a test asks for a grace period: most tests
# expect the upstream closed when their client leaves. A server a test starts is told so.
CHAT_RESUME_GRACE_SECONDS = float(os.environ.get("TEST_CHAT_RESUME_GRACE_SECONDS", "0"))
