"""A long new prompt is fed in chunks beside the running streams instead of freezing them."""

import time

from inference.engine import SamplingParams
from inference.engine.scheduler import ScheduledChunk
from tests.inference import models


def test_a_long_prompt_joining_never_costs_a_running_stream_a_step():
    engine = models.engine(models.tiny_model(), prefill_chunk=16, prefill_chunk_idle=64)
    engine.add_request("running", [5] * 10, SamplingParams(max_tokens=60))
    while not engine.step():
        pass  # its own prompt first
    engine.add_request("newcomer", list(range(3, 303)), SamplingParams(max_tokens=5))
    fed_per_step, running_got_a_token = [], []
    original = engine.runner.run

    def observing(chunks: list[ScheduledChunk], **options):
        fed_per_step.append(sum(len(c.token_ids) for c in chunks if c.sequence.request_id == "newcomer"))
        return original(chunks, **options)

    engine.runner.run = observing
    while any(s.request_id == "newcomer" and s.is_prefilling for s in engine.scheduler.running + list(engine.scheduler.waiting)):
        running_got_a_token.append(any(o.request_id == "running" for o in engine.step()))

    assert len(fed_per_step) == 300 // 16 + 1
    assert max(fed_per_step) == 16
    assert all(running_got_a_token)


def test_with_nothing_else_running_a_prompt_is_fed_in_bigger_chunks():
    engine = models.engine(models.tiny_model(), prefill_chunk=16, prefill_chunk_idle=64)
    engine.add_request("alone", list(range(3, 203)), SamplingParams(max_tokens=1))
    steps = 0
    while engine.has_work():
        engine.step()
        steps += 1

    assert steps == 200 // 64 + 1


def test_waiting_requests_join_as_soon_as_a_running_place_frees():
    engine = models.engine(models.tiny_model(), max_running=2)
    for name, max_tokens in [("a", 3), ("b", 8), ("c", 4)]:
        engine.add_request(name, [5, 6, 7], SamplingParams(max_tokens=max_tokens))
    joined_at = None
    step = 0
    while engine.has_work():
        outputs = engine.step()
        step += 1
        if joined_at is None and any(o.request_id == "c" for o in outputs):
            joined_at = step
        assert engine.num_running <= 2

    # a finishes at step 3; c is admitted at the top of step 4 and yields its first token there.
    assert joined_at == 4


def test_prompts_waiting_for_their_turn_keep_the_prompt_budget_from_shrinking():
    engine = models.engine(models.tiny_model(), max_running=8, prefill_chunk=64, prefill_chunk_min=4,
                           prefill_chunk_idle=64)
    engine.add_request("decoding", [5] * 10, SamplingParams(max_tokens=60))
    while not engine.step():
        pass
    for name in ("x", "y", "z"):
        engine.add_request(name, list(range(3, 203)), SamplingParams(max_tokens=5))

    chunks = engine.scheduler.schedule()

    fed = sum(len(chunk.token_ids) for chunk in chunks if chunk.sequence.request_id != "decoding")
    assert fed == 4 + 4  # the allowance plus one per running stream, the three newcomers included


def first_fed(engine) -> list[str]:
    """The requests whose prompt tokens the next step feeds (nothing decodes yet), in order."""
    return [chunk.sequence.request_id for chunk in engine.scheduler.schedule()]


def arrive(engine, name: str, prompt_tokens: int, waited: float, first_token: int = 3) -> None:
    """A request of `prompt_tokens` tokens from `first_token` on (prompts that start alike share
    a prefix), as if it came `waited` seconds ago."""
    engine.add_request(name, list(range(first_token, first_token + prompt_tokens)), SamplingParams(max_tokens=4))
    sequence = next(s for s in engine.scheduler.waiting if s.request_id == name)
    sequence.arrived_at = time.monotonic() - waited


def burst_engine():
    return models.engine(models.tiny_model(), prefill_chunk=32, prefill_chunk_min=32,
                         prefill_chunk_idle=32)


def test_in_a_burst_a_short_prompt_is_fed_before_a_long_one_that_came_a_moment_earlier():
    engine = burst_engine()
    arrive(engine, "long", 300, waited=5.05)
    arrive(engine, "short", 20, waited=5.00)

    assert first_fed(engine) == ["short", "long"]  # all 20 of short's tokens, then 12 of long's


def step_feeding(engine) -> list[str]:
    """Runs one step; the requests whose prompt tokens it fed, in the order it fed them."""
    fed = []
    run = engine.runner.run

    def observing(chunks: list[ScheduledChunk], **options):
        fed.extend(chunk.sequence.request_id for chunk in chunks if chunk.sequence.is_prefilling)
        return run(chunks, **options)

    engine.runner.run = observing
    try:
        engine.step()
    finally:
        del engine.runner.run
    return fed


def test_a_short_prompt_that_comes_while_a_long_one_is_being_fed_is_fed_first():
    engine = burst_engine()
    arrive(engine, "long", 300, waited=1.0)  # a long paste, fed for a while already
    assert step_feeding(engine) == ["long"]
    arrive(engine, "short", 20, waited=0.0, first_token=1000)

    assert step_feeding(engine) == ["short", "long"]  # all 20 of short's tokens, then 12 of long's


def test_a_long_prompt_passed_over_for_a_short_one_goes_before_the_next_fresh_one():
    engine = burst_engine()  # 32 prompt tokens a step
    arrive(engine, "long", 300, waited=0.0)
    arrive(engine, "short", 20, waited=0.0, first_token=1000)
    order = [step_feeding(engine)]
    arrive(engine, "fresh short", 20, waited=0.0, first_token=2000)
    order.append(step_feeding(engine))

    # The long prompt waited for short's 20 tokens: a claim the fresh one, which waited for none,
    # does not have.
    assert order == [["short", "long"], ["long"]]


def test_a_prompt_being_fed_is_not_overtaken_by_a_longer_one_that_came_after_it():
    engine = burst_engine()  # 32 prompt tokens a step
    arrive(engine, "first", 200, waited=0.0)
    arrive(engine, "second", 300, waited=0.0, first_token=1000)
    order = [step_feeding(engine) for _ in range(4)]

    # Taking turns, both would wait for both: first's token after 14 steps instead of 7, and
    # second's no sooner. The one passed over still goes before any fresh one (the test above).
    assert order == [["first"]] * 4
