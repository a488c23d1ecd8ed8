"""A real browser (Debian's Chromium, driven by Playwright) against the real stack on loopback:
nginx in front of daphne, with either the stand-in upstream or the real inference service."""

import json
import os
from contextlib import contextmanager
from pathlib import Path

import pytest

from harness import web_stack
from harness.page_probes import CHROMIUM, CHROMIUM_ARGS, page_state, wait_for_true
from tests import factories, servers
from tests.fakes.upstream import FakeUpstream

PASSWORD = "a-long-test-password"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A browser test that fails reports what the page showed and the answers' rows: a failure
    seen once in CI (a wait timed out) can then be told apart from a slow machine."""
    report = yield
    page = item.funcargs.get("page") if hasattr(item, "funcargs") else None
    if report.failed and call.when == "call" and page is not None:
        report.sections.append(("the page when the test failed", page_state(page)))
        report.sections.append(("the answers' rows", _generation_rows()))
    return report


def _generation_rows() -> str:
    from chatapp.models import Generation

    try:
        rows = Generation.objects.order_by("-pk").values_list(
            "pk", "status", "finish_reason", "cancelled_by", "error_code")[:5]
        return "\n".join(str(row) for row in rows) or "none"
    except Exception as error:  # no database in this test, or it is gone
        return f"not readable: {error}"


@pytest.fixture(scope="module")
def chromium():
    """One browser per module: Playwright's sync API runs an event loop in the main thread for
    as long as it lives, which the asyncio tests elsewhere must not find running."""
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `.ci/run` installs it (apt-get install chromium)")
    # These tests use the ORM in that thread; nothing here runs concurrently with it.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS,
                                                 headless=True)
            yield browser
            browser.close()
    finally:
        del os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"]


@contextmanager
def running_stack(inference_url: str, tmp_dir: Path, access_logs: tuple[Path, ...] = (), **settings):
    """daphne on the test database (one process per access log when given), nginx in front
    serving frontend/; yields the public URL."""
    env = {"DATABASE_URL": servers.shared_database_url(), "INFERENCE_URL": inference_url,
           "DJANGO_SETTINGS_MODULE": "tests.settings", "DJANGO_LOG_LEVEL": "WARNING",
           "DJANGO_SECRET_KEY": "browser-test-secret-" + "x" * 40,
           **{key: str(value) for key, value in settings.items()}}
    with web_stack.nginx_and_daphne(env, tmp_dir, access_logs) as url:
        yield url


@pytest.fixture(scope="session")
def inference_url(real_model_url):
    """The inference service with the default model (tests/conftest.py), shared with every module."""
    return real_model_url


# One stand-in and one stack for every module that needs no settings of its own: each test
# resets the stand-in's script (`upstream`) and signs in a user of its own.
@pytest.fixture(scope="session")
def fake_upstream():
    upstream = FakeUpstream()
    with servers.uvicorn_in_thread(upstream) as url:
        upstream.url = url
        yield upstream


@pytest.fixture(scope="session")
def stack_with_fake_upstream(django_db_setup, django_db_blocker, fake_upstream, tmp_path_factory):
    with running_stack(fake_upstream.url, tmp_path_factory.mktemp("stack")) as url:
        yield url


@pytest.fixture(scope="module")
def stack_with_grace(django_db_setup, django_db_blocker, fake_upstream, tmp_path_factory):
    """An answer outlives its page's connection here, as with the default settings (the other
    stacks end it at once): a module's own, on the shared stand-in."""
    with running_stack(fake_upstream.url, tmp_path_factory.mktemp("grace"),
                       TEST_CHAT_RESUME_GRACE_SECONDS=20) as url:
        yield url


@pytest.fixture
def upstream(fake_upstream):
    fake_upstream.reset()
    return fake_upstream


@pytest.fixture
def user(transactional_db):
    return factories.user(password=PASSWORD)


@pytest.fixture
def page(chromium):
    context = chromium.new_context(viewport={"width": 1200, "height": 800})
    page = context.new_page()
    page.console_errors = []
    page.on("console", lambda m: m.type == "error" and page.console_errors.append(m.text))
    page.on("pageerror", lambda e: page.console_errors.append(str(e)))
    yield page
    context.close()


def sign_in(page, base_url: str, user) -> None:
    page.goto(base_url + "/")
    sign_in_on_form(page, user)


def sign_in_on_form(page, user) -> None:
    """Signs in on the sign-in form the page shows (the page is not loaded again)."""
    page.fill("#login-form [name=username]", user.username)
    page.fill("#login-form [name=password]", PASSWORD)
    page.click("#login-form [type=submit]")
    page.wait_for_selector("#composer")


def open_conversation(page, conversation) -> None:
    """Opens `conversation` from the list and waits for its title in the heading."""
    item = f'#conversation-list li[data-conversation-id="{conversation.pk}"]'
    page.click(f"{item} .conversation-open")
    title = json.dumps(conversation.title)
    wait_for_true(page, f"document.querySelector('#conversation-title').textContent === {title}")


def held(page, pattern: str, method: str = "POST", most: int | None = None) -> list:
    """Holds every `method` request to `pattern` unanswered (other methods go on), or the first
    `most` of them; the list fills with them, for the test to let go (fault injection: a network
    that does not deliver)."""
    routes = []
    page.route(pattern, lambda route: (routes.append(route)
                                       if route.request.method == method and len(routes) != most
                                       else route.continue_()))
    return routes
