"""The untracked `.env` of a checkout: the local settings `make run` and manage.py read, and
where `make run` keeps the secret key it generated.

Read only under the project's own settings (DJANGO_SETTINGS_MODULE unset or chatapp.settings):
the tests start the stack and manage.py under theirs, and a developer's .env (a DATABASE_URL,
a REDIS_URL) must not reach those children.
"""

import secrets
from pathlib import Path

from dotenv import dotenv_values, load_dotenv, set_key

from common import env

SECRET_KEY = "DJANGO_SECRET_KEY"
PROJECT_SETTINGS = "chatapp.settings"
CHECKOUT_FILE = Path(__file__).resolve().parent.parent / ".env"


def load_local(*, with_secret_key: bool = False) -> bool:
    """Reads the local file (CHATAPP_ENV_FILE, else the checkout's .env) into the environment,
    first writing a secret key into it with `with_secret_key` (`make run`); True when it wrote
    one. Nothing under settings other than the project's own."""
    if env.string("DJANGO_SETTINGS_MODULE", PROJECT_SETTINGS) != PROJECT_SETTINGS:
        return False
    path = Path(env.string("CHATAPP_ENV_FILE") or CHECKOUT_FILE)
    wrote = with_secret_key and add_secret_key(path)
    load(path)
    return wrote


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
