"""`make run`'s supervisor brings up what exists, restarts each web process on its own, and stops
every child on Ctrl-C, SIGTERM or a closed terminal; its first words: a setting that is not
allowed is one line and a failed start, not a traceback, and a machine without nginx is told once
what that means."""

import os
import re
import signal
import socket
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx2
import psutil
import psycopg
import pytest

from harness import child_process, ports, waiting
from harness.child_process import REPO_DIR
from stack import commands
from stack.ports import listening

pytestmark = pytest.mark.process  # every test here starts the stack

ON_REDIS = bool(os.environ.get("REDIS_URL"))
ON_POSTGRES = os.environ.get("DATABASE_URL", "").startswith("postgres")
# `make run` starts several web processes only on Redis and PostgreSQL (stack/web.py).
SEVERAL_WEB_PROCESSES = ON_REDIS and ON_POSTGRES


@contextmanager
def own_database(directory: Path) -> Iterator[str]:
    """A database of the stack's own: on the test run's PostgreSQL server when it has one."""
    if not ON_POSTGRES:
        yield f"sqlite:///{directory / 'stack.sqlite3'}"
        return
    name = f"stack_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as server:
        server.execute(f'CREATE DATABASE "{name}"')
        try:
            yield urlsplit(os.environ["DATABASE_URL"])._replace(path=f"/{name}").geturl()
        finally:
            server.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def stack_database(tmp_path):
    with own_database(tmp_path) as url:
        yield url


def stack_env(database_url: str, public_port: int, daphne_port: int) -> dict[str, str]:
    """`make run` with two web processes asked."""
    inference_port = ports.free_port()
    return {
        "INFERENCE_PORT": str(inference_port),
        "INFERENCE_URL": f"http://127.0.0.1:{inference_port}",
        "DATABASE_URL": database_url,
        "CHATAPP_PORT": str(public_port),
        "CHATAPP_DAPHNE_PORT": str(daphne_port),
        "CHATAPP_WEB_PROCESSES": "2",
        "DJANGO_ADMIN_PASSWORD": "a-long-test-password",
    }


# SIGHUP: the terminal it runs in was closed. Before, it ended the supervisor alone, and every
# child, each in a process group of its own, ran on.
@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=["ctrl-c", "sigterm", "closed-terminal"])
def test_the_stack_serves_the_app_through_nginx_and_stops_on_ctrl_c_sigterm_or_a_closed_terminal(
        nginx_binary, stack_database, stop_signal):
    public_port, daphne_port = ports.free_port(), ports.free_port_run(2)
    env = stack_env(stack_database, public_port, daphne_port)
    base = f"http://127.0.0.1:{public_port}"

    with child_process.running(commands.whole_stack(), env=env, ready_url=f"{base}/healthz",
                         timeout_s=120, stop_signal=stop_signal) as stack:
        health = httpx2.get(f"{base}/healthz")
        login_page = httpx2.get(f"{base}/admin/login/")
        stylesheet = httpx2.get(f"{base}/static/admin/css/base.css")
        front_page = httpx2.get(f"{base}/")
        assert listening(daphne_port)
        if SEVERAL_WEB_PROCESSES:  # nginx answered through whichever came up first
            waiting.wait_until(lambda: listening(daphne_port + 1), 60, "the second web process")
        else:
            assert not listening(daphne_port + 1)

        stack.process.send_signal(stop_signal)
        status = stack.process.wait(timeout=30)
        output = stack.log_text()

    assert health.json() == {"status": "ok"}
    assert health.headers["server"] == "nginx"
    assert login_page.status_code == 200
    assert stylesheet.status_code == 200 and "text/css" in stylesheet.headers["content-type"]
    assert front_page.status_code == 200 and "<html" in front_page.text
    assert "Created admin account 'admin'" in output
    assert "nginx started" in output
    if SEVERAL_WEB_PROCESSES:
        assert "web-1 started" in output and "web-2 started" in output
    else:  # two asked, one started: the log says why
        assert "web started" in output and "2 web processes asked, starting one" in output
    if ON_REDIS:
        assert "worker started" in output and "worker stopped" in output
    else:
        assert "reaper started" in output and "reaper stopped" in output
    assert status == 0, output
    assert not listening(public_port)
    assert not listening(daphne_port)
    assert not listening(daphne_port + 1)


@dataclass
class SharedStack:
    """One stack the tests that leave it running share (each start costs 15-65 s of the real
    model loading), with what its start showed at the moment each fact held."""
    process: child_process.ChildProcess
    base: str
    daphne_port: int
    web_processes_listening_when_nginx_first_answered: list[bool]
    app_healthy_when_ready_was_said: bool
    model_healthy_when_ready_was_said: bool

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_text(self) -> str:
        return self.process.log_text()


@pytest.fixture(scope="module")
def shared_stack(nginx_binary, tmp_path_factory):
    """Awaited through nginx's own page, which reaches no web process: the first moment nginx
    answers at all is the one at which both web processes must already listen. The start-up
    facts are recorded here, as they happen, so no test depends on running first."""
    with own_database(tmp_path_factory.mktemp("shared-stack")) as database:
        public_port, daphne_port = ports.free_port(), ports.free_port_run(2)
        env = stack_env(database, public_port, daphne_port)
        base = f"http://127.0.0.1:{public_port}"
        with child_process.running(commands.whole_stack(), env=env, ready_url=f"{base}/",
                                   timeout_s=120) as process:
            web_processes_listening = [listening(daphne_port), listening(daphne_port + 1)]
            waiting.wait_until(lambda: "chatapp: ready at" in process.log_text(), 120, "the ready line")
            app_then = waiting.healthy(f"{base}/healthz")
            model_then = waiting.healthy(f"{env['INFERENCE_URL']}/health")
            yield SharedStack(process, base, daphne_port, web_processes_listening, app_then, model_then)


def test_the_stack_prints_its_address_once_it_answers_and_the_model_has_loaded(shared_stack):
    """Before, the address came first: it refused connections while nginx waited for its web
    processes, and a first question could meet the model still loading."""
    base = shared_stack.base
    # Read now, not at start: once stays once, after another test killed a web process too.
    output = shared_stack.log_text()

    starting = output.index(f"chatapp: starting; {base}/ once it answers")
    ready = output.index(f"chatapp: ready at {base}/")
    assert shared_stack.app_healthy_when_ready_was_said and shared_stack.model_healthy_when_ready_was_said
    assert starting < output.index("nginx started") < ready
    assert output.count("chatapp: ready at") == 1, output


def daphne_pid(stack, port: int) -> int | None:
    """The pid of the stack's daphne process listening on `port`, if one runs."""
    for child in psutil.Process(stack.pid).children(recursive=True):
        try:
            command = child.cmdline()
        except psutil.Error:  # it ended meanwhile
            continue
        if commands.DAPHNE_MODULE in command and str(port) in command:
            return child.pid
    return None


@pytest.mark.skipif(not SEVERAL_WEB_PROCESSES, reason="several web processes need Redis and PostgreSQL")
def test_a_killed_web_process_restarts_on_its_own_while_the_other_serves_through_nginx(shared_stack):
    stack, daphne_port, base = shared_stack, shared_stack.daphne_port, shared_stack.base

    waiting.wait_until(lambda: listening(daphne_port) and listening(daphne_port + 1), 60, "both web processes")
    first, second = daphne_pid(stack, daphne_port), daphne_pid(stack, daphne_port + 1)
    os.kill(first, signal.SIGKILL)
    waiting.wait_until(lambda: not listening(daphne_port), 10, "web-1 to die")
    healthy_meanwhile = [waiting.healthy(f"{base}/healthz") for _ in range(4)]
    # It leaves the stack whole again: the other tests sharing it may run after.
    waiting.wait_until(lambda: daphne_pid(stack, daphne_port) not in (None, first) and listening(daphne_port),
                       60, "web-1 to come back")
    second_after = daphne_pid(stack, daphne_port + 1)
    output = stack.log_text()

    assert healthy_meanwhile == [True] * 4
    assert second_after == second
    assert "web-1 exited" in output and "web-2 exited" not in output


@pytest.mark.skipif(not SEVERAL_WEB_PROCESSES, reason="several web processes need Redis and PostgreSQL")
def test_nginx_takes_no_request_before_every_web_process_listens(shared_stack):
    """A request nginx passed on to a web process still starting would find nothing, and nginx
    would then count that process failed for 10 s after it came up: with the other one killed
    meanwhile, nothing would serve."""
    assert shared_stack.web_processes_listening_when_nginx_first_answered == [True, True]
    assert "nginx starts once web-1, web-2 listen" in shared_stack.log_text()


@pytest.mark.parametrize("name, value, told", [
    ("CHAT_STALE_STREAM_SECONDS", "20", ["3 x CHAT_RELAY_HEARTBEAT_SECONDS", "CHAT_STALE_STREAM_SECONDS=30"]),
    ("CHAT_MAX_TOKENS", "0", ["at least 1", "CHAT_MAX_TOKENS=1"]),
    ("CHAT_MAX_TOKENS", "lots", ["an integer", "CHAT_MAX_TOKENS=512"]),
    ("CHATAPP_PORT", "eighty", ["an integer", "CHATAPP_PORT=8000"]),
    # Past the last port: before, an OverflowError's traceback from the check that it is free.
    ("CHATAPP_PORT", "99999", ["1 to 65535", "CHATAPP_PORT=8000 would do"]),
    ("INFERENCE_PORT", "70000", ["1 to 65535", "INFERENCE_PORT=8001 would do"]),
    # The inference service's own: before, it repeated its traceback at every restart.
    ("INFERENCE_DTYPE", "fp8", ["must be one of", "bfloat16"]),
    ("INFERENCE_MAX_RUNNING", "0", ["at least 1"]),
    ("INFERENCE_MODEL", "/no/such/model", ["does not exist", "a .gguf file"]),
    # One this machine cannot serve: before, the stack started and waited for ever on a 503.
    ("INFERENCE_CACHE_DIR", "/proc/nope", ["cannot be created"]),
])
def test_a_setting_that_is_not_allowed_is_one_line_naming_the_rule_and_a_value_that_would_do(name, value, told):
    env = {**os.environ, "DJANGO_SECRET_KEY": "test-secret-" + "x" * 40, name: value}

    finished = subprocess.run(commands.whole_stack(), cwd=REPO_DIR, env=env, capture_output=True,
                              text=True, timeout=120)

    lines = [line for line in (finished.stdout + finished.stderr).splitlines() if line.strip()]
    assert finished.returncode != 0
    assert len(lines) == 1, "\n".join(lines)
    assert name in lines[0] and "Traceback" not in lines[0]
    for words in told:
        assert words in lines[0]


@pytest.mark.parametrize("variable", ["CHATAPP_PORT", "CHATAPP_DAPHNE_PORT", "INFERENCE_PORT"])
def test_a_port_another_program_holds_is_one_line_naming_the_variable_and_a_free_port(
        nginx_binary, tmp_path, variable):
    """Before: the stack started, printed its address (another program's) and restarted nginx,
    daphne or the inference service, each failing to bind, for as long as it ran."""
    public_port, daphne_port = ports.free_port(), ports.free_port_run(2)
    database = f"sqlite:///{tmp_path / 'stack.sqlite3'}"
    env = {**os.environ, **stack_env(database, public_port, daphne_port),
           "DJANGO_SECRET_KEY": "test-secret-" + "x" * 40}
    held = {"CHATAPP_PORT": public_port, "CHATAPP_DAPHNE_PORT": daphne_port,
            "INFERENCE_PORT": int(env["INFERENCE_PORT"])}[variable]

    with socket.create_server(("127.0.0.1", held)):
        finished = subprocess.run(commands.whole_stack(), cwd=REPO_DIR, env=env,
                                  capture_output=True, text=True, timeout=120)

    lines = [line for line in (finished.stdout + finished.stderr).splitlines() if line.strip()]
    assert finished.returncode == 2
    assert len(lines) == 1, "\n".join(lines)
    assert f"127.0.0.1:{held}" in lines[0] and "in use" in lines[0]
    suggested = re.search(rf"{variable}=(\d+) would do", lines[0])
    assert suggested and not listening(int(suggested.group(1)))
    assert int(suggested.group(1)) not in (public_port, held)


@pytest.mark.parametrize("variable, same_as", [
    ("CHATAPP_DAPHNE_PORT", "CHATAPP_PORT"),
    ("INFERENCE_PORT", "CHATAPP_PORT"),
    ("INFERENCE_PORT", "CHATAPP_DAPHNE_PORT"),
])
def test_two_of_the_stacks_own_servers_on_one_port_are_one_line_naming_both_and_a_port_that_would_do(
        nginx_binary, tmp_path, variable, same_as):
    """Before: both were started on it, nginx looping on "Address already in use", and the
    address was said to be ready all the same."""
    public_port, daphne_port = ports.free_port(), ports.free_port_run(2)
    env = {**os.environ, **stack_env(f"sqlite:///{tmp_path / 'stack.sqlite3'}", public_port, daphne_port),
           "CHATAPP_WEB_PROCESSES": "1", "DJANGO_SECRET_KEY": "test-secret-" + "x" * 40}
    env[variable] = env[same_as]
    ours = {int(env[name]) for name in ("CHATAPP_PORT", "CHATAPP_DAPHNE_PORT", "INFERENCE_PORT")}

    finished = subprocess.run(commands.whole_stack(), cwd=REPO_DIR, env=env, capture_output=True,
                              text=True, timeout=120)

    lines = [line for line in (finished.stdout + finished.stderr).splitlines() if line.strip()]
    assert finished.returncode == 2
    assert len(lines) == 1, "\n".join(lines)
    assert f"{variable}={env[same_as]}" in lines[0] and f"{same_as}={env[same_as]}" in lines[0]
    suggested = re.search(rf"{variable}=(\d+) would do", lines[0])
    assert suggested and int(suggested.group(1)) not in ours and not listening(int(suggested.group(1)))


def test_without_nginx_on_the_path_the_stack_says_once_that_daphne_serves_the_port_itself(stack_database, tmp_path):
    public_port = ports.free_port()
    env = stack_env(stack_database, public_port, ports.free_port_run(2)) | {"PATH": str(tmp_path)}

    with child_process.running(commands.whole_stack(), env=env, ready_url=f"http://127.0.0.1:{public_port}/healthz",
                         timeout_s=120) as stack:
        health = httpx2.get(f"http://127.0.0.1:{public_port}/healthz")
        output = stack.log_text()

    told = [line for line in output.splitlines() if "nginx not found" in line]
    assert health.status_code == 200 and health.headers.get("server") != "nginx"
    assert len(told) == 1, output
    assert f"daphne serves port {public_port} itself" in told[0]
    assert "apt-get install nginx" in told[0]
