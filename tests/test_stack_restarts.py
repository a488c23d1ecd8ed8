"""Under `make run`, a crashed process comes back on its own and the rest keep serving.

One stack (with the real model) serves both tests; each leaves it whole again. Processes are
found (psutil) as the stack's descendants, so the tests do not depend on how the
supervisor starts them.
"""

import json
import os
import signal
from dataclasses import dataclass
from types import SimpleNamespace

import httpx2
import psutil
import pytest

from common.sse import SSEParser
from harness import child_process, ports, waiting
from stack import commands
from tests import servers

pytestmark = pytest.mark.slow

ADMIN_PASSWORD = "a-long-test-password"
MODEL_LOAD_TIMEOUT_S = 180


@dataclass
class Stack:
    process: object
    base_url: str
    inference_url: str

    def pid_of(self, module: str) -> int | None:
        """The pid of the descendant running `python -m <module>`, if one runs."""
        return self._descendant(lambda argv: argv[1:3] == ["-m", module] and not argv[0].endswith("sh"))

    def nginx_master_pid(self) -> int | None:
        # nginx rewrites its title into one string, which psutil splits at spaces.
        return self._descendant(lambda argv: " ".join(argv).startswith("nginx: master"))

    def _descendant(self, matches) -> int | None:
        return next((child.pid for child in psutil.Process(self.process.pid).children(recursive=True)
                     if matches(command_line(child))), None)

    def log(self) -> str:
        return "".join(self.process.log_text().splitlines(keepends=True)[-80:])


def command_line(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:  # it ended meanwhile
        return []


@pytest.fixture(scope="module")
def stack(nginx_binary, tmp_path_factory):
    public_port, daphne_port, inference_port = (ports.free_port() for _ in range(3))
    inference_url = f"http://127.0.0.1:{inference_port}"
    env = {
        "DATABASE_URL": f"sqlite:///{tmp_path_factory.mktemp('stack') / 'stack.sqlite3'}",
        "REDIS_URL": "",  # the default `make run`
        "CHATAPP_PORT": str(public_port),
        "CHATAPP_DAPHNE_PORT": str(daphne_port),
        "INFERENCE_PORT": str(inference_port),
        "INFERENCE_URL": inference_url,
        "DJANGO_ADMIN_PASSWORD": ADMIN_PASSWORD,
        "CHAT_MAX_TOKENS": "160",
        # No answer is reaped here for its heartbeat: one whose web process died is ended by
        # the process that replaces it (chatapp/asgi.py).
        "CHAT_STALE_STREAM_SECONDS": "600",
        "CHAT_REAP_INTERVAL_SECONDS": "0.5",
        "CHAT_MAX_STREAMS_PER_USER": "1",
    }
    base_url = f"http://127.0.0.1:{public_port}"
    with child_process.running(commands.whole_stack(), env=env, ready_url=f"{base_url}/healthz",
                         timeout_s=MODEL_LOAD_TIMEOUT_S, stop_signal=signal.SIGINT) as process:
        running = Stack(process, base_url, inference_url)
        waiting.wait_until(lambda: waiting.healthy(f"{inference_url}/health"), MODEL_LOAD_TIMEOUT_S,
                           "the inference service to load the model")
        yield running


def signed_in_client(stack: Stack) -> httpx2.Client:
    client = httpx2.Client(base_url=stack.base_url, timeout=60)
    servers.sign_in(client, SimpleNamespace(username="admin"))
    return client


def new_conversation(client: httpx2.Client) -> int:
    response = client.post("/api/conversations", json={"title": "restarts"},
                           headers={"X-CSRFToken": client.cookies["csrftoken"]})
    assert response.status_code == 201
    return response.json()["id"]


def stream_answer(client: httpx2.Client, conversation_id: int, on_first_delta=None,
                  refused: list[int] | None = None) -> list[tuple[str, dict]]:
    """Asks a question through nginx and reads the answer's events to the end of the stream.

    A refusal whose status is in `refused` returns no events; a cut connection ends the list.
    """
    parser, events = SSEParser(), []
    with client.stream("POST", f"/api/conversations/{conversation_id}/messages",
                       json={"content": "Tell me a long story about a lighthouse keeper."},
                       headers={"X-CSRFToken": client.cookies["csrftoken"]}) as response:
        if response.status_code in (refused or []):
            return []
        assert response.status_code == 200, response.read()
        try:
            for chunk in response.iter_bytes():
                for event in parser.feed(chunk):
                    events.append((event.event, json.loads(event.data)))
                    if event.event == "delta" and on_first_delta is not None:
                        on_first_delta()
                        on_first_delta = None
        except httpx2.RemoteProtocolError:
            pass  # the server went away mid-answer
    return events


def cut_text(events) -> str:
    return "".join(payload["text"] for name, payload in events if name == "delta")


def names(events) -> list[str]:
    return [name for name, _ in events]


def restarted(stack: Stack, module: str, old_pid: int) -> bool:
    pid = stack.pid_of(module)
    return pid is not None and pid != old_pid


def test_killing_the_inference_service_fails_the_open_stream_and_it_comes_back_while_the_web_serves(stack):
    client = signed_in_client(stack)
    conversation_id = new_conversation(client)
    old_pid = stack.pid_of("inference")
    assert old_pid is not None, stack.log()

    interrupted = stream_answer(client, conversation_id, on_first_delta=lambda: os.kill(old_pid, signal.SIGKILL))

    assert names(interrupted)[0] == "start" and "delta" in names(interrupted)
    assert names(interrupted)[-2:] == ["error", "done"], interrupted
    assert waiting.healthy(f"{stack.base_url}/healthz"), stack.log()
    assert httpx2.get(f"{stack.base_url}/admin/login/").status_code == 200
    waiting.wait_until(lambda: restarted(stack, "inference", old_pid) and waiting.healthy(f"{stack.inference_url}/health"),
                       MODEL_LOAD_TIMEOUT_S, "the inference service to come back")
    answer = stream_answer(client, conversation_id)
    assert names(answer)[0] == "start" and names(answer)[-1] == "done", answer
    assert answer[-1][1]["status"] in ("completed", "truncated"), answer


def test_killing_daphne_mid_answer_leaves_nginx_up_and_the_orphaned_answer_frees_its_user(stack):
    client = signed_in_client(stack)
    conversation_id = new_conversation(client)
    old_pid, nginx_pid = stack.pid_of(commands.DAPHNE_MODULE), stack.nginx_master_pid()
    assert old_pid is not None and nginx_pid is not None, stack.log()

    cut = stream_answer(client, conversation_id, on_first_delta=lambda: os.kill(old_pid, signal.SIGKILL))

    assert "delta" in names(cut) and "done" not in names(cut)
    waiting.wait_until(lambda: restarted(stack, commands.DAPHNE_MODULE, old_pid), 60, "daphne to come back")
    waiting.wait_until(lambda: waiting.healthy(f"{stack.base_url}/healthz"), 60, "the web to answer through nginx")
    assert stack.nginx_master_pid() == nginx_pid
    # The cut answer held the conversation (409) and the user's one stream (429) until the new
    # web process ended it (its heartbeat would not go stale for ten minutes); then the user chats again.
    answers = []
    waiting.wait_until(lambda: answers.append(stream_answer(client, conversation_id, refused=[409, 429]))
                       or answers[-1], 60, "the orphaned answer to be ended")
    answer = answers[-1]
    assert names(answer)[0] == "start" and names(answer)[-1] == "done", answer
    assert answer[-1][1]["status"] in ("completed", "truncated"), answer
    history = client.get(f"/api/conversations/{conversation_id}/messages").json()["results"]
    orphaned = [m for m in history if m["role"] == "assistant"][0]
    saved, seen = orphaned["content"], cut_text(cut)  # both prefixes of what the relay sent
    assert orphaned["status"] == "failed" and (seen.startswith(saved) or saved.startswith(seen))
