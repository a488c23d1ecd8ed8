"""The load generator reads the stand-in upstream's answers whole and exact, stream by stream."""

import pytest

from benchmarks.relay_load import DIRECT, Target
from benchmarks.relay_stack import base_url, stand_in, started

pytestmark = pytest.mark.process


async def test_a_direct_round_gets_every_token_of_every_stream_and_the_stand_ins_cpu():
    with started(stand_in(interval_ms=1.0, first_token_ms=0.0)) as upstream:
        target = Target(DIRECT, base_url(upstream))
        try:
            done = await target.round(3, 12, {"stand-in": [upstream.pid]}, stagger_s=0.001)
        finally:
            await target.aclose()

    assert [(s.ok, s.tokens) for s in done.streams] == [(True, 12)] * 3
    assert set(done.cpu_s) == {"stand-in", "client"}
