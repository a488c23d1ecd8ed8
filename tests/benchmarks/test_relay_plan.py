"""A relay run resized from the command line is a sample: it publishes only when asked."""

import argparse

from benchmarks import relay_bench


def plan(*argv: str) -> relay_bench.Plan:
    parser = argparse.ArgumentParser()
    relay_bench.add_arguments(parser)
    return relay_bench.plan_from(parser.parse_args(list(argv)))


def test_the_default_plan_is_the_full_run_of_the_issue():
    full = plan()

    assert (full.capacity_streams, full.offered_tok_s(full.capacity_streams)) == (500, 25_000)
    assert full.offered_tok_s(full.steady_streams, full.steady_interval_ms) == 1_000
    assert not full.quick


def test_a_resized_run_is_a_sample():
    resized = plan("--capacity-streams", "200", "--web-processes", "1,2,3")

    assert resized.capacity_streams == 200 and resized.web_processes == (1, 2, 3)
    assert resized.quick
