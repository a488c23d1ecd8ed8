"""Settings come from the environment, every variable is documented, and bad values stop start-up."""

import json
import os
import re
import secrets
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from common import env

REPO_DIR = Path(__file__).resolve().parent.parent
SOURCE_DIRS = ["chatapp", "common", "inference", "stack", "benchmarks", "reliability"]
ENV_READ = re.compile(r"\benv\.(?:string|boolean|integer|number|port|words|parsed)\(\s*\"([A-Z0-9_]+)\"")
# Reads of one named variable; copying the environment for a child process is no such read.
DIRECT_READ = re.compile(r"os\.getenv\(|os\.environ\.get\(|os\.environ\[")


def documented_variables() -> set[str]:
    lines = (REPO_DIR / ".env.example").read_text().splitlines()
    return {line.split("=", 1)[0].strip() for line in lines if "=" in line and not line.startswith("#")}


def python_sources():
    for folder in SOURCE_DIRS:
        yield from (REPO_DIR / folder).rglob("*.py")


SETTINGS_AS_JSON = (
    "import json, django; from django.conf import settings; django.setup();"
    "print(json.dumps({'DEBUG': settings.DEBUG, 'CHANNEL_LAYERS': settings.CHANNEL_LAYERS,"
    "'CACHES': settings.CACHES, 'CELERY_BROKER_URL': settings.CELERY_BROKER_URL,"
    "'CELERY_TASK_ALWAYS_EAGER': settings.CELERY_TASK_ALWAYS_EAGER,"
    "'ENGINE': settings.DATABASES['default']['ENGINE']}))"
)


def settings_under(variables: dict[str, str], script: str = SETTINGS_AS_JSON,
                   timeout: float = 120) -> subprocess.CompletedProcess:
    """Runs `script` after the real settings in a fresh process with exactly these variables set."""
    environment = {"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "chatapp.settings", **variables}
    return subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_DIR, env=environment, capture_output=True, text=True,
        timeout=timeout,
    )


def test_every_variable_the_settings_read_is_listed_in_env_example():
    from django.conf import settings

    assert settings.configured
    assert env.names_read  # the settings did read through common.env
    assert env.names_read <= documented_variables()


def test_every_variable_named_in_the_source_is_listed_in_env_example():
    named = {name for path in python_sources() for name in ENV_READ.findall(path.read_text())}

    assert "DATABASE_URL" in named
    assert named - documented_variables() == set()


def test_only_common_env_reads_the_environment_directly():
    readers = {
        str(path.relative_to(REPO_DIR))
        for path in python_sources()
        if DIRECT_READ.search(path.read_text())
    }

    assert readers == {"common/env.py"}


@pytest.mark.process
def test_debug_is_off_by_default():
    result = settings_under({"DJANGO_SECRET_KEY": "x" * 50})

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["DEBUG"] is False


@pytest.mark.process
def test_a_missing_secret_key_stops_start_up_when_debug_is_off():
    result = settings_under({})

    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY is required" in result.stderr


@pytest.mark.parametrize(
    "variable, value",
    [
        ("DATABASE_URL", "bogus"),
        ("DATABASE_URL", "postgres://user:pass@host:notaport/db"),
        ("DJANGO_DEBUG", "perhaps"),
    ],
)
@pytest.mark.process
def test_a_bad_value_stops_start_up_with_a_message_naming_the_variable(variable, value):
    result = settings_under({"DJANGO_SECRET_KEY": "x" * 50, variable: value})

    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert variable in result.stderr.splitlines()[-1]


@pytest.mark.process
def test_without_redis_everything_runs_in_process():
    result = settings_under({"DJANGO_SECRET_KEY": "x" * 50})
    loaded = json.loads(result.stdout)

    assert loaded["CHANNEL_LAYERS"]["default"]["BACKEND"] == "channels.layers.InMemoryChannelLayer"
    assert loaded["CACHES"]["default"]["BACKEND"].endswith("LocMemCache")
    assert loaded["CELERY_TASK_ALWAYS_EAGER"] is True
    assert loaded["ENGINE"] == "chatapp.runtime.sqlite_queue"  # SQLite, its writers queued in Python


@pytest.mark.process
def test_redis_url_moves_the_channel_layer_cache_and_broker_to_redis():
    url = "redis://127.0.0.1:6379/3"
    result = settings_under({"DJANGO_SECRET_KEY": "x" * 50, "REDIS_URL": url})
    loaded = json.loads(result.stdout)

    [host] = loaded["CHANNEL_LAYERS"]["default"]["CONFIG"]["hosts"]
    assert host["address"] == url
    # None: a socket timeout puts each command under asyncio.wait_for, which in Python 3.11
    # loses a cancellation (tests/fakes/cancellation_as_sent.py)
    assert host["socket_timeout"] is None and host["socket_keepalive"] is True
    assert loaded["CACHES"]["default"]["LOCATION"] == url
    assert loaded["CELERY_BROKER_URL"] == url
    assert loaded["CELERY_TASK_ALWAYS_EAGER"] is False


@pytest.mark.process
@pytest.mark.parametrize("variables, upstream", [
    ({}, "http://127.0.0.1:8001"),
    ({"INFERENCE_URL": ""}, "http://127.0.0.1:8001"),  # as .env.example leaves it
    ({"INFERENCE_PORT": "8201"}, "http://127.0.0.1:8201"),  # `make run`'s service moved there
    ({"INFERENCE_HOST": "0.0.0.0", "INFERENCE_PORT": "8201"}, "http://127.0.0.1:8201"),
    ({"INFERENCE_PORT": "8201", "INFERENCE_URL": "http://gpu-box:8000/"}, "http://gpu-box:8000"),
])
def test_the_app_asks_the_inference_service_its_own_variables_place_unless_told_another(
        variables, upstream):
    result = settings_under({"DJANGO_SECRET_KEY": "x" * 50, **variables},
                            "from django.conf import settings; print(settings.INFERENCE_URL)")

    assert result.stdout.strip() == upstream, result.stderr


@pytest.mark.parametrize("value", ["70000", "0"])
def test_a_port_out_of_range_is_refused_naming_the_variable_and_a_port_that_would_do(monkeypatch, value):
    """Before, INFERENCE_PORT=70000 (or CHATAPP_PORT=99999) got as far as a socket's bind: an
    OverflowError's traceback."""
    from common import inference_address

    monkeypatch.setenv("INFERENCE_PORT", value)

    with pytest.raises(env.BadVariable, match=rf"INFERENCE_PORT must be a port, 1 to 65535, got {value} "
                                              rf"\(INFERENCE_PORT=8001 would do\)"):
        inference_address.port()


def test_an_empty_variable_means_its_default_as_env_example_says(monkeypatch):
    monkeypatch.setenv("CHAT_MODEL", "")
    monkeypatch.setenv("ALLOWED_HOSTS", " ")
    monkeypatch.setenv("CHAT_MODEL_TITLES", "")
    monkeypatch.setenv("CHAT_MAX_TOKENS", "")

    assert env.string("CHAT_MODEL", "SmolLM2-135M-Instruct") == "SmolLM2-135M-Instruct"
    assert env.words("ALLOWED_HOSTS", "localhost,127.0.0.1") == ["localhost", "127.0.0.1"]
    assert env.boolean("CHAT_MODEL_TITLES", True) is True
    assert env.integer("CHAT_MAX_TOKENS", 512) == 512


@pytest.mark.process
def test_an_empty_database_url_means_the_sqlite_file_under_var():
    """.env.example says so, and a copy of it as .env sets it empty: start-up refused it."""
    result = settings_under({"DJANGO_SECRET_KEY": "x" * 50, "DATABASE_URL": ""},
                            "from django.conf import settings; print(settings.DATABASES['default']['NAME'])")

    assert result.stdout.strip() == str(REPO_DIR / "var" / "db.sqlite3"), result.stderr


@pytest.mark.process
def test_database_url_selects_postgresql():
    result = settings_under(
        {"DJANGO_SECRET_KEY": "x" * 50, "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/test"}
    )

    assert json.loads(result.stdout)["ENGINE"] == "django.db.backends.postgresql"


@pytest.mark.process
def test_a_postgresql_server_that_never_answers_is_given_up_on_after_the_connect_timeout():
    """A host down or cut off answers nothing; libpq alone waits for it forever, and a database
    thread waiting there holds every call queued behind it, a relay's final write included."""
    connecting = ("import django; django.setup(); from django.db import OperationalError, connection\n"
                  "try: connection.ensure_connection()\n"
                  "except OperationalError as error: print(error)")
    # The kernel takes the connection into the listen queue; nobody ever reads it.
    with socket.create_server(("127.0.0.1", 0)) as silent:
        result = settings_under({"DJANGO_SECRET_KEY": "x" * 50, "CHAT_DATABASE_CONNECT_TIMEOUT_SECONDS": "2",
                                 "DATABASE_URL": f"postgres://postgres@127.0.0.1:{silent.getsockname()[1]}/test"},
                                connecting, timeout=30)  # bounds a failure only

    assert "timeout expired" in result.stdout, result.stderr


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's connections")
def test_a_postgresql_connection_finds_its_server_gone_silent_within_half_a_minute():
    """Keepalives are on by default, but first probe after two hours, and a statement sent and
    never acknowledged (a final write to a server that vanished) is sent again for some
    fifteen minutes."""
    connection.ensure_connection()
    with socket.socket(fileno=os.dup(connection.connection.fileno())) as sock:
        probing = [sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)] + [
            sock.getsockopt(socket.IPPROTO_TCP, option)
            for option in (socket.TCP_KEEPIDLE, socket.TCP_KEEPINTVL, socket.TCP_KEEPCNT, socket.TCP_USER_TIMEOUT)]

    on, idle_s, interval_s, count, unacknowledged_ms = probing
    assert on and idle_s + interval_s * count <= 30 and 0 < unacknowledged_ms <= 30_000


@pytest.mark.process
def test_a_sqlite_database_keeps_a_write_ahead_log_synced_at_checkpoints_not_at_every_commit(tmp_path):
    pragmas = (
        "import json, django; django.setup(); from django.db import connection;"
        "cursor = connection.cursor();"
        "print(json.dumps([cursor.execute('PRAGMA journal_mode').fetchone()[0],"
        " cursor.execute('PRAGMA synchronous').fetchone()[0]]))"
    )
    result = settings_under({"DJANGO_SECRET_KEY": "x" * 50,
                             "DATABASE_URL": f"sqlite:///{tmp_path / 'app.sqlite3'}"}, pragmas)

    assert json.loads(result.stdout) == ["wal", 1]  # synchronous 1 is NORMAL (2, FULL, is the default)


def deploy_check(variables: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {key: value for key, value in os.environ.items() if key.startswith(("PATH", "HOME", "LANG"))}
    return subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
                          cwd=REPO_DIR, env={**clean, "DJANGO_SETTINGS_MODULE": "chatapp.settings",
                                             "CHATAPP_ENV_FILE": os.devnull, **variables},  # no developer's .env
                          capture_output=True, text=True, timeout=120)


@pytest.mark.process
def test_the_production_settings_pass_the_deploy_check_with_no_warning():
    result = deploy_check({"DJANGO_DEBUG": "0", "DJANGO_SECRET_KEY": "k3P9-real-looking-" + secrets.token_urlsafe(40),
                           "CHAT_SECURE_COOKIES": "1", "ALLOWED_HOSTS": "chat.example.com"})

    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


@pytest.mark.process
def test_without_secure_cookies_the_deploy_check_warns_about_them():
    result = deploy_check({"DJANGO_DEBUG": "0", "DJANGO_SECRET_KEY": "k3P9-real-looking-" + secrets.token_urlsafe(40),
                           "ALLOWED_HOSTS": "chat.example.com"})

    assert result.returncode != 0
    assert "SESSION_COOKIE_SECURE" in result.stderr


@pytest.mark.process
def test_secure_cookies_make_both_cookies_https_only_and_turn_on_hsts():
    script = ("import json, django; from django.conf import settings; django.setup();"
              "print(json.dumps([settings.SESSION_COOKIE_SECURE, settings.CSRF_COOKIE_SECURE,"
              " settings.SECURE_HSTS_SECONDS]))")
    secure = settings_under({"DJANGO_SECRET_KEY": "x" * 50, "CHAT_SECURE_COOKIES": "1"}, script)
    plain = settings_under({"DJANGO_SECRET_KEY": "x" * 50}, script)

    assert json.loads(secure.stdout) == [True, True, 365 * 24 * 3600]
    assert json.loads(plain.stdout) == [False, False, 0]


@pytest.mark.process
def test_each_test_worker_and_the_processes_it_starts_share_a_redis_index_of_their_own():
    from tests.settings import redis_index_of_this_worker

    asked = "redis://127.0.0.1:6379/0"
    first, second = (redis_index_of_this_worker(asked, worker) for worker in ("gw0", "gw1"))
    child = subprocess.run(
        [sys.executable, "-c", "from django.conf import settings; print(settings.REDIS_URL)"],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTEST_XDIST_WORKER": "gw1",
             "TEST_REDIS_URL_ASKED": asked, "REDIS_URL": second},
        cwd=REPO_DIR, capture_output=True, text=True, check=True)

    assert (first, second) == (asked, "redis://127.0.0.1:6379/8")
    assert redis_index_of_this_worker("redis://127.0.0.1:6379/3", "gw1") == "redis://127.0.0.1:6379/11"
    assert [redis_index_of_this_worker(asked, f"gw{n}", workers=3) for n in range(3)] == [
        asked, "redis://127.0.0.1:6379/5", "redis://127.0.0.1:6379/10"]
    assert redis_index_of_this_worker("", "gw1") == "" and redis_index_of_this_worker(asked, "") == asked
    assert child.stdout.strip() == second
