"""The HTTP-layer benchmark streams the stand-in engine's known answers and checks each one."""

import pytest

from benchmarks.inference_http import measure

pytestmark = pytest.mark.process


def test_a_short_run_finds_every_stream_exact_and_every_first_token_alone():
    figures = measure(streams=4, step_ms=2.0, tokens_per_stream=40)

    assert figures["exact_streams"] == 4
    assert figures["first_token_alone"] == 4
    assert figures["errors"] == []
    assert figures["offered_tokens_per_s"] == 2000
    assert 0 < figures["events_per_token"] <= 1
