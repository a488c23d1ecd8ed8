"""nginx passes a request that found a web process gone to the next one, but never a POST it had
already sent: that one may have started an answer, and a second process would start it again.

Two web processes stand behind nginx's real site (nginx/chatapp.conf.template): one that reads
every request and vanishes without answering (tests/fakes), and one that answers and counts.
"""

from collections import Counter
from contextlib import contextmanager

import httpx2
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from harness import child_process, ports
from stack import nginx
from tests import servers
from tests.fakes.vanishing_web_process import VanishingWebProcess

REQUESTS = 4


def counting_app(received: Counter) -> Starlette:
    async def answer(request):
        received[request.method] += 1
        return JSONResponse({"ok": True})

    async def health(request):
        return JSONResponse({"status": "ok"})

    return Starlette(routes=[Route("/api/answer", answer, methods=["GET", "POST"]), Route("/healthz", health)])


@contextmanager
def nginx_before_a_vanishing_and_a_counting_process(tmp_path, received: Counter):
    with VanishingWebProcess() as vanishing, servers.uvicorn_in_thread(counting_app(received)) as counting_url:
        public_port = ports.free_port()
        site = nginx.NginxSite(listen=f"127.0.0.1:{public_port}",
                               upstreams=(vanishing.address, counting_url.removeprefix("http://")))
        config = nginx.render(site, tmp_path / "nginx")
        # nginx's own /healthz would pass it to the vanishing process: wait for the port alone.
        with child_process.running(nginx.command(config), ready_url=f"http://127.0.0.1:{public_port}/index.html"):
            yield f"http://127.0.0.1:{public_port}", vanishing


def test_a_get_that_found_its_process_gone_is_answered_by_the_next(nginx_binary, tmp_path):
    received = Counter()
    with nginx_before_a_vanishing_and_a_counting_process(tmp_path, received) as (base, vanishing):
        statuses = [httpx2.get(f"{base}/api/answer").status_code for _ in range(REQUESTS)]

    assert vanishing.requests_read >= 1
    assert statuses == [200] * REQUESTS
    assert received["GET"] == REQUESTS


def test_a_post_already_sent_to_a_process_that_vanished_is_never_sent_again(nginx_binary, tmp_path):
    received = Counter()
    with nginx_before_a_vanishing_and_a_counting_process(tmp_path, received) as (base, vanishing):
        statuses = [httpx2.post(f"{base}/api/answer", json={"content": "go"}).status_code for _ in range(REQUESTS)]

    assert vanishing.requests_read >= 1
    assert statuses.count(502) == vanishing.requests_read
    assert received["POST"] == statuses.count(200) == REQUESTS - vanishing.requests_read
