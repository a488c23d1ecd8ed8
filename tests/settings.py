"""Settings for the test run: the real ones, with a throwaway secret when none is set."""

import os
import secrets

os.environ.setdefault("DJANGO_SECRET_KEY", f"test-only-{secrets.token_urlsafe(32)}")

from chatapp.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast; tests only
