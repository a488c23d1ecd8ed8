import signal
import sys
from contextlib import ExitStack

import pytest

from harness import child_process, ports
from stack import commands, nginx
from tests import child_processes, llama_server, servers, workers


def pytest_configure(config):
    child_processes.refuse_in_unmarked_tests()


# Before xdist's own hook, which names each test's group from the marks this one adds: a test
# with no group goes out alone (its file's module fixtures then set up on both workers).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    child_processes.mark(items)
    workers.group(items)


# Last: pytest-django sorts the tests by how they use the database, which sent the longest
# groups (they use none) out at the end, one worker running them alone.
@pytest.hookimpl(trylast=True, specname="pytest_collection_modifyitems")
def pytest_collection_modifyitems_last(items):
    # The longest groups first, those of llama.cpp's server last: it may still be building.
    items[:] = workers.longest_first(items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    with child_processes.watching(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    with child_processes.watching(item):
        return (yield)


def pytest_collection_finish(session):
    if llama_server.needed_by(session.items):
        llama_server.start_background_build()


def pytest_sessionfinish(session, exitstatus):
    llama_server.stop_background_build()


@pytest.fixture(autouse=True)
def database_threads_close_their_connections_after_each_test():
    """The async views keep connections on their threads: the test database is dropped at the end."""
    yield
    database_threads = sys.modules.get("chatapp.runtime.database_threads")  # imported only by app tests
    if database_threads is not None:
        database_threads.close_connections()


@pytest.fixture(autouse=True)
def each_test_gets_its_own_channel_layer():
    """Each async test runs on an event loop of its own, but Channels keeps one layer per process:
    a Redis layer's receive lock, left held by a receive that an earlier test's loop cancelled,
    then belongs to a loop that is gone, and the next test's receive fails with "bound to a
    different event loop" (seen once in a full run: test_live_hub). A server process has one
    loop for its life, so only the tests need a fresh layer. Only where Channels was imported:
    the engine's tests run on a lent GPU machine, which has no Channels."""
    layers = sys.modules.get("channels.layers")
    if layers is not None:
        layers.channel_layers.backends.clear()
    yield


@pytest.fixture(scope="session")
def real_model_url():
    """The inference service with the default model, in this process, under the name the chat app
    gives it (2,048 positions, four answers at once): one for every test that only asks it, each
    of which would otherwise load the model and build an engine again. Imported here: loading
    the engine is slow, and most sessions (`make check`) never ask for it."""
    from tests.inference.serving import real_model_serving

    with real_model_serving(max_running=4) as url:
        yield url


@pytest.fixture(scope="session")
def second_model_url():
    """The default model's weights served again as SECOND_MODEL_NAME (tests/inference/serving.py):
    a second upstream with a model of its own, beside ours or llama.cpp's server."""
    from tests.inference.serving import SECOND_MODEL_NAME, real_model_serving

    with real_model_serving(SECOND_MODEL_NAME, max_running=4) as url:
        yield url


@pytest.fixture(scope="session")
def probe_app_port():
    """A real daphne serving the app plus the probe views (tests/probe_views.py)."""
    port = ports.free_port()
    with child_process.running(commands.daphne(port), env={"DJANGO_SETTINGS_MODULE": servers.PROBE_SETTINGS}, ready_url=f"http://127.0.0.1:{port}/healthz"):
        yield port


@pytest.fixture(scope="session")
def nginx_binary():
    binary = nginx.installed()
    if binary is None:
        pytest.fail("nginx is not installed: `.ci/run` installs it (apt-get install nginx)")
    return binary


@pytest.fixture
def nginx_in_front(nginx_binary, probe_app_port, tmp_path):
    """Call it (optionally with a site template) to start nginx in front of the probe app."""
    with ExitStack() as stack:

        def start(site_template: str | None = None) -> int:
            port = ports.free_port()
            site = nginx.NginxSite(listen=f"127.0.0.1:{port}", upstreams=(f"127.0.0.1:{probe_app_port}",))
            config = nginx.render(site, tmp_path / f"nginx-{port}", site_template)
            stack.enter_context(child_process.running(
                nginx.command(config), ready_url=f"http://127.0.0.1:{port}/healthz",
                stop_signal=signal.SIGQUIT,
            ))
            return port

        yield start
