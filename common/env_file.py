"""The untracked `.env` of a checkout: the local settings `make run` reads, and where it keeps
the secret key it generated."""

import secrets
from pathlib import Path

from dotenv import dotenv_values, load_dotenv, set_key

from common import env

SECRET_KEY = "DJANGO_SECRET_KEY"


def add_secret_key(path: Path) -> bool:
    """Writes a fresh secret key into the file unless the environment or the file sets one;
    True when it wrote one. A file that exists keeps its other lines (a copy of .env.example,
    a POSTGRES_PASSWORD for Docker), its empty key's line filled in place; a new one is readable
    by its owner alone."""
    if env.string(SECRET_KEY) or (path.exists() and dotenv_values(path).get(SECRET_KEY)):
        return False
    path.touch(mode=0o600)
    set_key(path, SECRET_KEY, secrets.token_urlsafe(50), quote_mode="never")
    return True


def load(path: Path) -> None:
    """Sets the file's variables that the environment does not set: the shell's own win."""
    load_dotenv(path, override=False)
