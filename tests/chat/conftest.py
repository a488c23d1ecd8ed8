import httpx2
import pytest
from asgiref.sync import sync_to_async
from django.core.cache import cache
from django.db import connections
from django.test import AsyncClient

from chatapp.streaming import prompt_fit
from chatapp.upstream import inference_replicas
from chatapp.upstream import models as upstream_models
from tests import factories, servers
from tests.chat.redis_restart import restartable_redis  # noqa: F401 (a fixture, for the tests here)
from tests.fakes.upstream import FakeUpstream


@pytest.fixture(scope="session")
def fake_upstream_server():
    upstream = FakeUpstream()
    with servers.uvicorn_in_thread(upstream) as url:
        yield upstream, url


@pytest.fixture
def upstream(fake_upstream_server, settings):
    """The stand-in upstream, reset, with the app pointed at it."""
    fake, url = fake_upstream_server
    fake.reset()
    prompt_fit.forget()  # what it learned of the last test's upstream
    settings.INFERENCE_URL = url
    upstream_models.forget()  # what it serves is read again
    inference_replicas.forget()  # an earlier test's refusal does not send requests elsewhere
    return fake


@pytest.fixture
def user(transactional_db):
    return factories.user()


@pytest.fixture
def other_user(transactional_db):
    return factories.user()


@pytest.fixture
async def api(user):
    client = AsyncClient()
    await client.aforce_login(user)
    yield client
    # Views ran their queries in asgiref's worker thread: close its connection, or the test
    # database cannot be dropped at the end.
    await sync_to_async(connections.close_all)()


@pytest.fixture
def small_login_limits(settings):
    """The sign-in limit (chatapp/login_limit.py) small enough to reach in a few requests, its
    counts in the cache (Redis) cleared before and after."""
    settings.CHAT_LOGIN_ATTEMPTS = 3
    settings.CHAT_LOGIN_SPREAD_ATTEMPTS = 6
    settings.CHAT_LOGIN_WINDOW_SECONDS = 300
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def conversation(user):
    return factories.conversation(owner=user)


@pytest.fixture
def signed_in_daphne(user):
    """A real daphne on the test database (the test client never closes connections, and drops
    a HEAD's body itself) and a client signed in to it, its CSRF token in hand as a page's."""
    with servers.daphne_on(servers.shared_database_url()) as base_url, \
            httpx2.Client(base_url=base_url, timeout=30) as client:
        servers.sign_in(client, user)
        client.headers["X-CSRFToken"] = client.cookies["csrftoken"]
        yield client
