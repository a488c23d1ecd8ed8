"""What the engine answers about itself (`limits()`, `stats()`), and the one rule of its context."""

import pytest

from inference.engine import ContextLengthExceeded, SamplingParams
from tests.inference import models

TRAINED = 2048  # the tiny model's max_position_embeddings


@pytest.mark.parametrize("configured, context", [(None, TRAINED), (100, 100), (4 * TRAINED, TRAINED)])
def test_the_context_is_the_models_own_unless_configured_lower(configured, context):
    engine = models.engine(models.tiny_model(), max_model_len=configured, max_cached_tokens=4 * 4096)

    limits = engine.limits()

    assert limits.max_model_len == context
    assert (limits.max_num_seqs, limits.max_cached_tokens) == (8, 4 * 4096)


def test_the_context_is_no_longer_than_one_sequence_may_hold_in_the_cache():
    engine = models.engine(models.tiny_model(), max_model_len=None, max_cached_tokens=1024,
                           cache_group_size=4)

    assert engine.limits().max_model_len == 256


def test_a_prompt_and_answer_beyond_the_context_are_refused_naming_the_part_that_does_not_fit():
    limits = models.engine(models.tiny_model(), max_model_len=100).limits()

    with pytest.raises(ContextLengthExceeded) as prompt_alone:
        limits.answer_room(100, None)
    with pytest.raises(ContextLengthExceeded) as with_answer:
        limits.answer_room(60, 41)

    assert prompt_alone.value.is_prompt_alone and not with_answer.value.is_prompt_alone
    assert (limits.answer_room(60, None), limits.answer_room(60, 40)) == (40, 40)


def test_the_engine_refuses_a_request_by_the_same_rule():
    engine = models.engine(models.tiny_model(), max_model_len=100)

    with pytest.raises(ContextLengthExceeded):
        engine.add_request("long", list(range(3, 63)), SamplingParams(max_tokens=41))

    assert engine.stats().num_waiting == 0


def test_stats_count_the_running_the_waiting_and_the_cache_they_hold():
    engine = models.engine(models.tiny_model(), max_running=1)
    idle = engine.stats()
    engine.add_request("first", list(range(3, 40)), SamplingParams(max_tokens=2))
    engine.add_request("second", list(range(3, 40)), SamplingParams(max_tokens=2))

    engine.step()
    busy = engine.stats()
    while engine.has_work():
        engine.step()
    done = engine.stats()

    assert (idle.num_running, idle.num_waiting, idle.num_cache_bytes) == (0, 0, 0)
    assert (busy.num_running, busy.num_waiting) == (1, 1)
    assert busy.num_cache_bytes > 0 and 0 < busy.cache_usage <= 1
    assert (done.num_running, done.num_waiting) == (0, 0)
    assert done.num_cache_bytes == done.num_reusable_bytes > 0  # only the kept prefix is left
    assert done.num_kept_rows == 1 and done.num_kept_tokens >= 37
    assert done.num_prefix_hits == 1 and done.num_reused_tokens == 36  # the second took the first's prompt
    assert done.num_prefilled_tokens == 37 + 1
