"""The relay's verdicts compare daphne with the direct path of the same run, and the section
states them with the table and the command."""

from dataclasses import asdict

from benchmarks import relay_table, targets
from benchmarks.relay_bench import Plan


def figures(ttft_ms=30.0, gap_ms=20.0, tok_s=1000.0, us_per_token=None, ok=10, streams=10,
            errors=None) -> dict:
    return {"streams": streams, "ok": ok, "error_kinds": errors or {},
            "ttft_s": {"p50": ttft_ms / 1000, "p90": ttft_ms / 1000, "p99": ttft_ms / 1000},
            "gap_s": {"p50": gap_ms / 1000, "p90": gap_ms / 1000, "p99": gap_ms / 1000},
            "tokens": 100, "events": 50, "events_per_token": 0.5, "delivered_tok_s": tok_s,
            "cpu_cores": {"daphne": 0.5, "client": 0.1}, "daphne_cpu_us_per_token": us_per_token,
            "other_cores": 0.0}


def results(**overrides) -> dict:
    found = {
        "ttft direct": figures(ttft_ms=30.0), "ttft through": figures(ttft_ms=31.5),
        "steady direct": figures(gap_ms=20.0),
        "steady through": figures(gap_ms=23.0, us_per_token=200.0),
        "capacity direct": figures(tok_s=24_000.0),
        "capacity through": figures(tok_s=12_000.0, gap_ms=100.0, us_per_token=80.0),
        "capacity nginx 1": figures(tok_s=11_000.0), "capacity nginx 2": figures(tok_s=15_000.0),
    }
    found.update(overrides)
    return {"command": "python -m benchmarks relay", "started": "2026-12-01 07:00 UTC",
            "duration_s": 120.0, "plan": asdict(Plan()), "offered_tok_s": 25_000.0,
            "steady_offered_tok_s": 1_000.0,
            "machine": {"cpu": "a CPU", "cores": 2, "memory_gb": 8.0, "python": "3.11",
                        "django": "5.2", "daphne": "4.2", "load_average": "0.1", "commit": "abc"},
            "figures": found, "inference_http": None}


def verdicts(data: dict) -> dict[str, bool | None]:
    return {t["name"].split(":")[0]: t["passed"] for t in targets.relay(data)}


def test_each_target_is_judged_from_its_own_measurement():
    assert verdicts(results()) == {
        "added TTFT p50 @1": True, "daphne CPU per relayed token @steady <= 250 µs": True,
        "added gap p50 @steady": False, "capacity": True,
        "inference service HTTP layer alone": None}


def test_capacity_fails_when_one_stream_is_incomplete_and_says_why():
    data = results(**{"capacity through": figures(
        tok_s=12_000.0, ok=499, streams=500, errors={"no end of stream": 1})})

    complete = next(t for t in targets.relay(data) if "complete and exact" in t["name"])

    assert complete["passed"] is False
    assert complete["detail"] == "499/500 streams: 1 x no end of stream"


def test_capacity_below_ten_thousand_tokens_a_second_fails():
    data = results(**{"capacity through": figures(tok_s=9_000.0, us_per_token=80.0)})

    delivered = next(t for t in targets.relay(data) if "delivers" in t["name"])

    assert delivered["passed"] is False


def inference_http(**overrides) -> dict:
    return {"streams": 64, "offered_tokens_per_s": 32_000.0, "delivered_tokens_per_s": 30_000.0,
            "exact_streams": 64, "first_token_alone": 64, **overrides}


def test_the_inference_http_layer_is_judged_once_measured():
    data = results()
    data["inference_http"] = inference_http()

    layer = targets.relay(data)[-1]

    assert layer["passed"] is True
    assert layer["detail"] == ("30,000 of 32,000 tokens/s = 94%; 64/64 streams exact, 64/64 "
                               "first tokens alone")


def test_the_inference_http_layer_fails_when_a_first_token_was_merged():
    data = results()
    data["inference_http"] = inference_http(first_token_alone=63)

    assert targets.relay(data)[-1]["passed"] is False


def test_the_section_has_every_measurement_its_verdicts_and_the_command():
    data = results()
    data["targets"] = targets.relay(data)

    text = relay_table.section(data)

    assert "Command: `python -m benchmarks relay`" in text
    assert "| capacity: nginx + 2 daphne | 10/10 |" in text
    assert "- **FAIL** added gap p50 @steady: through daphne - direct <= 2 ms: +3.00 ms" in text
    assert "Inference service HTTP layer alone (benchmarks/inference_http.py): N/A" in text


def test_the_section_says_so_when_the_client_alone_cannot_offer_the_load():
    data = results(**{"capacity direct": figures(tok_s=15_000.0)})
    data["targets"] = targets.relay(data)

    assert "this machine cannot offer the full load" in relay_table.section(data)
