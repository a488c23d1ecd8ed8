"""Settings for the test run: the real ones, with a throwaway secret when none is set."""

import os
import secrets

os.environ.setdefault("DJANGO_SECRET_KEY", f"test-only-{secrets.token_urlsafe(32)}")
# The inference services the tests start serve through the fused forward: compiling the decode
# step costs a minute or more of a small CPU per service, in the background beside the test.
# tests/inference/test_decode_graph.py holds the compiled step to transformers' logits and to
# the fused forward's tokens, compiled before serving and in the background while serving;
# `python -m benchmarks step` times it on the real model.
os.environ.setdefault("INFERENCE_COMPILE", "off")


def redis_index_of_this_worker(url: str, worker: str, workers: int = 2) -> str:
    """`make test` runs pytest-xdist workers, each on its own test database, so all reuse the
    same ids: the channel layer's groups, the cache's counts and Celery's queues would cross
    between them on one Redis index. Of `workers` workers, worker gwN takes the index N x
    16 // workers past the one asked (16 indexes by default: 8 apart for two workers), and sets
    it in the environment, so its child processes share it."""
    if not url or not worker.startswith("gw"):
        return url
    base, _, index = url.rstrip("/").rpartition("/")
    if not index.isdigit():
        base, index = url.rstrip("/"), "0"
    return f"{base}/{(int(index) + 16 // max(workers, 1) * int(worker[2:])) % 16}"


# A child process that loads these settings inherits both variables: it keeps the index.
_asked = os.environ.setdefault("TEST_REDIS_URL_ASKED", os.environ.get("REDIS_URL", ""))
if os.environ.get("REDIS_URL", "") == _asked:
    os.environ["REDIS_URL"] = redis_index_of_this_worker(_asked, os.environ.get("PYTEST_XDIST_WORKER", ""),
                                                         int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "2")))

from chatapp.settings import *  # noqa: E402,F403

# Off unless a test asks for them: a title request is one more upstream request, which the
# tests that count the upstream's requests do not expect. A server a test starts is told so.
CHAT_MODEL_TITLES = os.environ.get("TEST_CHAT_MODEL_TITLES") == "1"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast; tests only
# A departed page's answer ends at once unless a test asks for a grace period: most tests
# expect the upstream closed when their client leaves. A server a test starts is told so.
CHAT_RESUME_GRACE_SECONDS = float(os.environ.get("TEST_CHAT_RESUME_GRACE_SECONDS", "0"))
# Emptied between transactional tests by DELETE, not TRUNCATE: ten times faster for the few
# rows a test leaves (tests/postgresql_emptied_by_delete/base.py says why).
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":  # noqa: F405
    DATABASES["default"]["ENGINE"] = "tests.postgresql_emptied_by_delete"  # noqa: F405
