"""nginx in front of daphne passes a stream of small events through one by one.

The probe stream (tests/probe_views.py) sends 40 events of about 50 bytes, 50 ms apart: small
enough that a buffering proxy holds them all. A negative control runs the same measurement
through nginx's defaults with the app's X-Accel-Buffering header left out, and must see the
batching, which shows the measurement can fail.
"""

import time
from dataclasses import dataclass

import httpx2

from tests.probe_views import EVENT_COUNT, EVENT_INTERVAL_S

# Events sent 50 ms apart that arrive closer together than this came out of one buffer flush.
SAME_BURST_S = EVENT_INTERVAL_S / 3

DEFAULT_BUFFERED_SITE = """
upstream chatapp_web { ${CHATAPP_UPSTREAM_SERVERS} }
server {
    listen ${CHATAPP_LISTEN};
    location / {
        proxy_pass http://chatapp_web;
        proxy_set_header Host $http_host;
    }
}
"""


@dataclass
class Arrivals:
    event_times: list[float]  # seconds from the request, one per complete event
    total_s: float

    @property
    def bursts(self) -> int:
        gaps = zip(self.event_times, self.event_times[1:])
        return 1 + sum(1 for earlier, later in gaps if later - earlier > SAME_BURST_S)

    @property
    def arrived_one_by_one(self) -> bool:
        return (
            len(self.event_times) == EVENT_COUNT
            and self.bursts == EVENT_COUNT
            and self.event_times[0] < self.total_s / 4
        )


def stream_arrivals(url: str) -> Arrivals:
    started = time.monotonic()
    times: list[float] = []
    pending = b""
    with httpx2.stream("GET", url, timeout=30) as response:
        assert response.status_code == 200
        for data in response.iter_raw():
            now = time.monotonic() - started
            pending += data
            while b"\n\n" in pending:
                _, pending = pending.split(b"\n\n", 1)
                times.append(now)
    return Arrivals(times, time.monotonic() - started)


def test_small_events_pass_through_nginx_one_by_one(nginx_in_front):
    port = nginx_in_front()

    arrivals = stream_arrivals(f"http://127.0.0.1:{port}/api/_probe/stream")

    assert len(arrivals.event_times) == EVENT_COUNT
    assert arrivals.bursts == EVENT_COUNT
    assert arrivals.event_times[0] < arrivals.total_s / 4
    assert arrivals.arrived_one_by_one


def test_a_default_buffered_nginx_without_the_header_is_caught_batching(nginx_in_front):
    port = nginx_in_front(DEFAULT_BUFFERED_SITE)

    arrivals = stream_arrivals(f"http://127.0.0.1:{port}/api/_probe/stream?accel_header=0")

    assert len(arrivals.event_times) == EVENT_COUNT
    assert arrivals.bursts < EVENT_COUNT
    assert not arrivals.arrived_one_by_one


def test_the_apps_header_alone_unbuffers_even_a_default_nginx(nginx_in_front):
    port = nginx_in_front(DEFAULT_BUFFERED_SITE)

    arrivals = stream_arrivals(f"http://127.0.0.1:{port}/api/_probe/stream")

    assert arrivals.arrived_one_by_one


def test_a_post_with_csrf_through_nginx_on_a_non_default_port_succeeds(nginx_in_front):
    port = nginx_in_front()
    origin = f"http://127.0.0.1:{port}"
    with httpx2.Client(base_url=origin, timeout=10) as client:
        client.get("/api/_probe/echo")
        token = client.cookies["csrftoken"]

        accepted = client.post(
            "/api/_probe/echo", json={"hello": "world"},
            headers={"X-CSRFToken": token, "Origin": origin, "Referer": f"{origin}/"},
        )
        refused = client.post("/api/_probe/echo", json={"hello": "world"}, headers={"Origin": origin})

    assert accepted.status_code == 200
    assert accepted.json() == {"ok": True, "received": {"hello": "world"}}
    assert refused.status_code == 403
