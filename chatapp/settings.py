"""Django settings, read from the environment (every variable is listed in `.env.example`)."""

import socket
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from common import env, inference_address

BASE_DIR = Path(__file__).resolve().parent.parent


def _required_in_production(name: str, debug: bool, development_default: str) -> str:
    value = env.string(name)
    if value:
        return value
    if debug:
        return development_default
    raise ImproperlyConfigured(
        f"{name} is required when DJANGO_DEBUG is off (`make run` writes one into .env)"
    )


try:
    DEBUG = env.boolean("DJANGO_DEBUG", False)
    SECRET_KEY = _required_in_production(
        "DJANGO_SECRET_KEY", DEBUG, "insecure-development-key-only-for-debug"
    )
    ALLOWED_HOSTS = env.words("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
    CSRF_TRUSTED_ORIGINS = env.words("CSRF_TRUSTED_ORIGINS")
    # One or several replicas, comma-separated (chatapp/upstream/inference_replicas.py); unset
    # or empty, the service INFERENCE_HOST and INFERENCE_PORT place, as `make run` starts it.
    INFERENCE_URL = (env.string("INFERENCE_URL") or inference_address.local_url()).rstrip("/")
    INFERENCE_METRICS_INTERVAL_SECONDS = env.number("INFERENCE_METRICS_INTERVAL_SECONDS", 2.0, minimum=0.1)
    INFERENCE_AVOID_SECONDS = env.number("INFERENCE_AVOID_SECONDS", 10.0, minimum=0)
    INFERENCE_RESOLVE_REPLICAS = env.boolean("INFERENCE_RESOLVE_REPLICAS", False)
    # How often the upstreams' /v1/models are read again (chatapp/upstream/models.py).
    INFERENCE_MODELS_INTERVAL_SECONDS = env.number("INFERENCE_MODELS_INTERVAL_SECONDS", 10.0, minimum=0.1)
    REDIS_URL = env.string("REDIS_URL")
    LOG_LEVEL = env.string("DJANGO_LOG_LEVEL", "INFO").upper()
    DATABASE_URL = env.string("DATABASE_URL", f"sqlite:///{BASE_DIR / 'var' / 'db.sqlite3'}")
    # The chat: what is asked of the inference service, and the limits that keep it alive.
    # The model of a new conversation; every model the upstreams list may be chosen.
    CHAT_MODEL = env.string("CHAT_MODEL", "SmolLM2-135M-Instruct")
    CHAT_MAX_TOKENS = env.integer("CHAT_MAX_TOKENS", 512, minimum=1)
    # The default model loops under greedy decoding, so chat samples by default.
    CHAT_TEMPERATURE = env.number("CHAT_TEMPERATURE", 0.7, minimum=0)
    CHAT_TOP_P = env.number("CHAT_TOP_P", 0.9, minimum=0.01)
    # After a conversation's first answer the model names it (chatapp/upstream/titles.py).
    CHAT_MODEL_TITLES = env.boolean("CHAT_MODEL_TITLES", True)
    # The context is the upstream's own (chatapp/prompt_fit.py); this caps it when set (0: no cap).
    CHAT_CONTEXT_TOKENS = env.integer("CHAT_CONTEXT_TOKENS", 0, minimum=0)
    CHAT_MAX_MESSAGE_CHARS = env.integer("CHAT_MAX_MESSAGE_CHARS", 8000, minimum=1)
    CHAT_MAX_SYSTEM_PROMPT_CHARS = env.integer("CHAT_MAX_SYSTEM_PROMPT_CHARS", 4000, minimum=1)
    CHAT_MAX_STREAMS_PER_USER = env.integer("CHAT_MAX_STREAMS_PER_USER", 2, minimum=1)
    # A user's watch streams open at once in one web process (chatapp/runtime/user_shares.py): each
    # tab follows its conversation's answer and the others' being written; more is a flood.
    CHAT_MAX_WATCHES_PER_USER = env.integer("CHAT_MAX_WATCHES_PER_USER", 32, minimum=1)
    CHAT_HEARTBEAT_SECONDS = env.number("CHAT_HEARTBEAT_SECONDS", 15.0, minimum=0.01)
    CHAT_SAVE_INTERVAL_SECONDS = env.number("CHAT_SAVE_INTERVAL_SECONDS", 1.0, minimum=0.01)
    # A watch stream (chatapp/streaming/watch.py) that hears nothing on its answer's live channel for this
    # long reads the saved rows (a relay that died, a message the layer dropped).
    CHAT_WATCH_INTERVAL_SECONDS = env.number("CHAT_WATCH_INTERVAL_SECONDS", 1.0, minimum=0.01)
    # An answer whose page's connection dropped goes on this long without a reader, for the page
    # to come back to (chatapp/streaming/relay.py); 0 ends it at once, as a departed client's.
    CHAT_RESUME_GRACE_SECONDS = env.number("CHAT_RESUME_GRACE_SECONDS", 60.0, minimum=0)
    CHAT_GENERATION_TIMEOUT_SECONDS = env.number("CHAT_GENERATION_TIMEOUT_SECONDS", 600.0, minimum=1)
    # A relay proves it is alive on a timer of its own, tokens or not; a streaming answer whose
    # relay has not done so for CHAT_STALE_STREAM_SECONDS lost it (a crash) and is reaped.
    CHAT_RELAY_HEARTBEAT_SECONDS = env.number("CHAT_RELAY_HEARTBEAT_SECONDS", 10.0, minimum=0.01)
    CHAT_STALE_STREAM_SECONDS = env.number("CHAT_STALE_STREAM_SECONDS", 60.0, minimum=0.01)
    # A relay whose final write the database refuses (down, restarting) tries it again this long,
    # the answer held in memory and its page kept waiting (chatapp/runtime/database_outage.py).
    CHAT_DATABASE_PATIENCE_SECONDS = env.number("CHAT_DATABASE_PATIENCE_SECONDS", 300.0, minimum=0)
    # A web process keeps a key in Redis this long, rewritten four times as often; an answer whose
    # relay's process lost its key is reaped at once (chatapp/runtime/web_process.py), heartbeat or not.
    CHAT_WEB_PROCESS_TTL_SECONDS = env.number("CHAT_WEB_PROCESS_TTL_SECONDS", 10.0, minimum=1)
    # How often that check runs: Celery beat with Redis, `manage.py reap_streams` without.
    CHAT_REAP_INTERVAL_SECONDS = env.number("CHAT_REAP_INTERVAL_SECONDS", 5.0, minimum=0.1)
    # Audit rows and deleted conversations older than this many days are purged (chatapp/staff/retention.py);
    # 0 keeps them forever.
    CHAT_RETENTION_DAYS = env.integer("CHAT_RETENTION_DAYS", 0, minimum=0)
    # Threads that run the async views' database work, each with a connection it keeps
    # (chatapp/runtime/database_threads.py): at most this many connections per daphne process.
    CHAT_DATABASE_THREADS = env.integer("CHAT_DATABASE_THREADS", 8, minimum=1)
    # A PostgreSQL server that answers nothing (a host down or cut off) is given up on after this
    # long; libpq alone waits forever. Whole seconds, at least 2 (libpq's own floor).
    CHAT_DATABASE_CONNECT_TIMEOUT_SECONDS = env.integer("CHAT_DATABASE_CONNECT_TIMEOUT_SECONDS", 10, minimum=2)
    INFERENCE_CONNECT_TIMEOUT_SECONDS = env.number("INFERENCE_CONNECT_TIMEOUT_SECONDS", 5.0, minimum=0.1)
    # Between two upstream reads; the inference service sends a heartbeat every 15 s while quiet.
    INFERENCE_READ_TIMEOUT_SECONDS = env.number("INFERENCE_READ_TIMEOUT_SECONDS", 60.0, minimum=1)
    INFERENCE_MAX_CONNECTIONS = env.integer("INFERENCE_MAX_CONNECTIONS", 1000, minimum=1)
    # Behind TLS: cookies only over HTTPS, and browsers told to use nothing else (HSTS).
    CHAT_SECURE_COOKIES = env.boolean("CHAT_SECURE_COOKIES", False)
    # Failed sign-ins (chatapp/login_limit.py): per account from one address before that pair is
    # refused for the window; per account or per address before each failure adds a growing delay.
    CHAT_LOGIN_ATTEMPTS = env.integer("CHAT_LOGIN_ATTEMPTS", 10, minimum=1)
    CHAT_LOGIN_SPREAD_ATTEMPTS = env.integer("CHAT_LOGIN_SPREAD_ATTEMPTS", 100, minimum=1)
    CHAT_LOGIN_WINDOW_SECONDS = env.integer("CHAT_LOGIN_WINDOW_SECONDS", 300, minimum=1)
except env.BadVariable as error:
    raise ImproperlyConfigured(str(error)) from error

if CHAT_STALE_STREAM_SECONDS < 3 * CHAT_RELAY_HEARTBEAT_SECONDS:
    # A heartbeat or two may be late under load; a live answer must never look dead.
    raise ImproperlyConfigured(
        f"CHAT_STALE_STREAM_SECONDS must be at least 3 x CHAT_RELAY_HEARTBEAT_SECONDS "
        f"({3 * CHAT_RELAY_HEARTBEAT_SECONDS:g}), got {CHAT_STALE_STREAM_SECONDS:g} "
        f"(CHAT_STALE_STREAM_SECONDS={3 * CHAT_RELAY_HEARTBEAT_SECONDS:g} would do)")

try:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=0)}
except ValueError as error:  # dj-database-url's UnknownSchemeError and ParseError
    raise ImproperlyConfigured(f"DATABASE_URL is not a usable database URL: {error}") from error

if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # A server gone silent (nothing refuses or closes the connection) would hold a database thread,
    # and every call queued behind it, for as long as the kernel waits: keepalives first probe
    # after two hours, and a statement never acknowledged is sent again for some fifteen minutes.
    # Here an open connection fails within 30 s (3 probes 5 s apart after 10 s of quiet; data
    # unacknowledged for 30 s). A live server's kernel answers both however long its query runs.
    # Options in DATABASE_URL's query string come first.
    DATABASES["default"]["OPTIONS"] = {
        "connect_timeout": CHAT_DATABASE_CONNECT_TIMEOUT_SECONDS,
        "keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3,
        "tcp_user_timeout": 30_000, **DATABASES["default"].get("OPTIONS", {}),
    }
elif DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    # Writers queue for the lock instead of failing with "database is locked" when a
    # transaction that began reading must upgrade to writing; within one process they queue in
    # Python (chatapp/runtime/sqlite_queue), which hands the lock on at once.
    DATABASES["default"]["ENGINE"] = "chatapp.runtime.sqlite_queue"
    # WAL: readers go on while one writes. synchronous=NORMAL: a commit appends to the log
    # without waiting for the disk (an fsync, milliseconds, in front of every answer's first
    # token); the log is synced at checkpoints, so a crash of the process loses nothing and a
    # power cut may lose the last commits but never corrupts the file (sqlite.org/wal.html).
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE", "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL",
    }
    # Tests on SQLite run daphne in a subprocess; a file lets it see the test database.
    DATABASES["default"]["TEST"] = {"NAME": str(BASE_DIR / "var" / "test.sqlite3")}

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "chatapp",
]

# Django's standard stack, each class a subclass whose hooks run on the event loop under ASGI
# instead of a hop to a worker thread apiece (chatapp/runtime/middleware.py).
MIDDLEWARE = [
    "chatapp.runtime.middleware.Security",
    # Outside the session's: it tells of a password change once the session is stored.
    "chatapp.streaming.session_end_signals.tells_session_ends",
    "chatapp.runtime.middleware.Session",
    "chatapp.runtime.middleware.Common",
    "chatapp.runtime.middleware.Csrf",
    "chatapp.runtime.middleware.Authentication",
    "chatapp.runtime.middleware.Messages",
    "chatapp.runtime.middleware.XFrameOptions",
    "chatapp.runtime.middleware.ContentSecurityPolicy",
    "chatapp.login_limit.known_device",
]

ROOT_URLCONF = "chatapp.urls"
# Django's sign-in form is the admin's alone (the app signs in through the API): where its
# `next` is refused (another site) it lands on the admin, not on Django's /accounts/profile/.
LOGIN_REDIRECT_URL = "admin:index"
ASGI_APPLICATION = "chatapp.asgi.application"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# Django's ModelBackend behind the sign-in limit: it refuses before any password is checked, for
# the API and the admin alike.
AUTHENTICATION_BACKENDS = ["chatapp.login_limit.SignInLimit"]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "var" / "static"
FRONTEND_DIR = BASE_DIR / "frontend"
# Without Redis, each web process's presence: a file it holds locked (chatapp/runtime/presence_file.py).
CHAT_WEB_PROCESS_DIR = BASE_DIR / "var" / "web-processes"

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # the front end reads the token to send it in X-CSRFToken
# JSON under /api/, Django's HTML page elsewhere (chatapp/error_views.py).
CSRF_FAILURE_VIEW = "chatapp.error_views.csrf_failure"
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
# What a page may load and run, sent by whichever serves it, nginx or daphne alone (`make run`
# without nginx), so that an answer's Markdown meets the same second line of defence behind
# either. The front end's files run only their own scripts and styles (nginx's `location /`
# sends this very policy: tests/chat/test_content_policy.py holds the two equal); Django's pages
# (the admin, the staff pages, the API's answers) have inline styles and the charts' SVG.
CHAT_FRONT_END_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
                         "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
                         "frame-ancestors 'none'")
CHAT_PAGES_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                     "img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
                     "form-action 'self'; frame-ancestors 'none'")
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = CHAT_SECURE_COOKIES
SECURE_HSTS_SECONDS = 365 * 24 * 3600 if CHAT_SECURE_COOKIES else 0
# The checks look for Django's middleware by its dotted path; chatapp.runtime.middleware.Security,
# Csrf and XFrameOptions are subclasses of those very classes (they only run their hooks on the
# event loop), so the protection is in place and these warnings do not apply. Django then skips
# the HSTS checks too: tests/test_settings.py checks the cookie and HSTS values itself.
SILENCED_SYSTEM_CHECKS = ["security.W001", "security.W002", "security.W003"]
# nginx terminates the client connection and says which scheme it saw.
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
USE_X_FORWARDED_HOST = False

# A Redis gone silent (its host down, a network cut: no reset) is given up on within about 30 s:
# keepalive probes after 15 s of quiet, three unanswered 5 s apart; and as keepalive waits while
# a command is unacknowledged (the receive loop's pop, sent every 5 s), 30 s of that ends it too.
# Without them the kernel's defaults wait two hours, or some fifteen minutes of retransmissions.
REDIS_SILENCE_OPTIONS = {
    option: value
    for name, value in (("TCP_KEEPIDLE", 15), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3), ("TCP_USER_TIMEOUT", 30_000))
    if (option := getattr(socket, name, None)) is not None  # Linux's names
}

if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # No socket timeout (redis-py's default is 5 s): with one, redis-py sends each command
            # under asyncio.wait_for, which in Python 3.11 loses a cancellation arriving as the
            # send completes (CPython gh-86296), and a cancelled receive then waits for ever. The
            # layer's own blocking pop ends every 5 s; our waits a user feels carry their own
            # bounds (live_channel.LAYER_WITHIN_SECONDS); a vanished server is found by TCP.
            "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": None, "socket_keepalive": True,
                                  "socket_keepalive_options": REDIS_SILENCE_OPTIONS}]},
        }
    }
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
    }
    CELERY_BROKER_URL = REDIS_URL
    CELERY_TASK_ALWAYS_EAGER = False
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    CELERY_BROKER_URL = "memory://"
    CELERY_TASK_ALWAYS_EAGER = True
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_BEAT_SCHEDULE = {
    "fail-interrupted-streams": {
        "task": "chatapp.tasks.fail_interrupted_streams",
        "schedule": CHAT_REAP_INTERVAL_SECONDS,
    },
    # As often as a claim lives (StreamClaim.LIFETIME): expired ones of users who never return.
    "purge-expired-stream-claims": {
        "task": "chatapp.tasks.purge_expired_stream_claims",
        "schedule": 60.0,
    },
    # Hourly: yesterday is rolled up soon after midnight (once its last answer ended).
    "roll-up-audit-days": {
        "task": "chatapp.tasks.roll_up_audit_days",
        "schedule": 3600.0,
    },
    # Hourly: each round deletes little, a batch per transaction; a no-op while retention is off.
    "purge-expired-records": {
        "task": "chatapp.tasks.purge_expired_records",
        "schedule": 3600.0,
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
}
