"""Decode steps replayed per bucket of rows and context (captured_steps.py): what a GPU replays
as CUDA graphs, run here as calls on the same static tensors (CaptureMode.CALLS).

The first tests give the buckets a step of our own (`rows_summed`: each row's outputs from its
own keys, values, id and position alone), so that what a replay returns can be told from what
an uncaptured call on the step's own batch returns; the last runs the compiled step itself.
"""

import dataclasses
import random

import pytest
import torch

from inference.engine import SamplingParams, group_view
from inference.engine.captured_steps import Bucket, CapturedSteps, CaptureMode
from inference.engine.decode_graph import CompileMode
from inference.engine.kv_cache import BLOCK_TOKENS, CacheShape, KVCache
from tests.inference import models
from tests.inference.test_group_view import decode_of

SHAPE = CacheShape(num_layers=2, num_kv_heads=3, head_dim=8, dtype=torch.float64, device=torch.device("cpu"))


def rows_summed(token_ids, positions, keys, values):
    """A step whose every output row depends on that row's inputs alone: its keys and values
    before its position, its id and position."""
    visible = (torch.arange(keys.shape[3], device=keys.device)[None, :] < positions[:, None]).to(keys.dtype)
    seen = torch.einsum("lrktd,rt->rlkd", keys + 2 * values, visible)  # [rows, layers, kv_heads, dim]
    logits = seen.flatten(1) + token_ids[:, None] * 1000.0 + positions[:, None]
    return logits, logits.argmax(dim=-1), seen.transpose(0, 1), -seen.transpose(0, 1)


def cache_with(lengths: list[int], max_tokens: int = 64 * BLOCK_TOKENS, shape: CacheShape = SHAPE
               ) -> tuple[KVCache, list]:
    """A cache whose rows hold random keys and values, one row for each length; the decodes of a
    step over them (each row `length - 1` keys cached)."""
    cache = KVCache(shape, max_tokens=max_tokens, max_rows=8, group_size=2)
    generator = torch.Generator().manual_seed(len(lengths))
    decodes = []
    for length in lengths:
        slot = cache.allocate(length + 2)
        for tensor in cache.tensors(slot.group):
            keys = torch.randn(tensor[:, slot.row].shape, generator=generator, dtype=shape.dtype)
            tensor[:, slot.row].copy_(keys)
        decodes.append(decode_of(slot, length - 1))
    return cache, decodes


def step_inputs(decodes, device: torch.device = SHAPE.device) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.tensor([17 + index for index in range(len(decodes))], device=device)
    return ids, torch.cat([decode.positions for decode in decodes]).to(device)


def uncaptured(cache, decodes):
    ids, positions = step_inputs(decodes, cache.shape.device)
    return rows_summed(ids, positions, *group_view.gather(cache, decodes))


def test_a_step_goes_to_the_bucket_of_its_rows_and_context_each_rounded_up_to_a_power_of_two():
    assert Bucket.of(1, 1) == Bucket(1, BLOCK_TOKENS)
    assert Bucket.of(3, BLOCK_TOKENS) == Bucket(4, BLOCK_TOKENS)
    assert Bucket.of(5, BLOCK_TOKENS + 1) == Bucket(8, 2 * BLOCK_TOKENS)
    assert Bucket.of(16, 5 * BLOCK_TOKENS) == Bucket(16, 8 * BLOCK_TOKENS)


def test_a_replayed_step_gives_each_row_what_the_uncaptured_step_gives_it():
    cache, decodes = cache_with([40, 3 * BLOCK_TOKENS + 5, 9])  # three rows over two groups
    captured = CapturedSteps(rows_summed, cache, cuda_graphs=False)

    replayed = captured.run(*step_inputs(decodes), decodes)

    assert captured.buckets == [Bucket(4, 4 * BLOCK_TOKENS)]
    for ours, theirs in zip(replayed, uncaptured(cache, decodes), strict=True):
        torch.testing.assert_close(ours, theirs)


def test_each_bucket_is_captured_once_and_replayed_for_every_step_of_it():
    cache, decodes = cache_with([40, 50, 9])
    captured = CapturedSteps(rows_summed, cache, cuda_graphs=False)
    for _ in range(3):
        captured.run(*step_inputs(decodes), decodes)
    captured.run(*step_inputs(decodes[:1]), decodes[:1])  # one row: a bucket of its own

    assert captured.buckets == [Bucket(4, BLOCK_TOKENS), Bucket(1, BLOCK_TOKENS)]
    assert (captured.num_captures, captured.num_replays) == (2, 4)


def test_a_row_whose_group_ends_before_its_buckets_length_reads_zeros_there_not_an_earlier_steps_keys():
    cache, decodes = cache_with([7 * BLOCK_TOKENS, 7 * BLOCK_TOKENS, 2 * BLOCK_TOKENS + 30])
    for decode in decodes[:2]:  # the long rows' keys and values are NaN: the batch holds them after
        for tensor in cache.tensors(decode.group):
            tensor[:, decode.rows] = float("nan")
    captured = CapturedSteps(rows_summed, cache, cuda_graphs=False)
    captured.run(*step_inputs(decodes), decodes)
    short = decodes[2:]
    assert cache.tensors(short[0].group)[0].shape[3] == 3 * BLOCK_TOKENS  # its bucket's: 4 blocks

    replayed = captured.run(*step_inputs(short), short)

    assert captured.buckets[-1] == Bucket(1, 4 * BLOCK_TOKENS)
    for ours, theirs in zip(replayed, uncaptured(cache, short), strict=True):
        torch.testing.assert_close(ours, theirs)


needs_cuda = pytest.mark.skipif(models.DEVICE.type != "cuda", reason="CUDA graphs need a GPU (make gpu-check)")


# On the lent H100 the capture after a growth failed inside torch's allocator (an internal assert
# at capture_begin): the graphs dropped at the growth had been the last users of their memory
# pool, and the next capture asked for that pool again.
@pytest.mark.parametrize("cuda_graphs", [False, pytest.param(True, marks=needs_cuda)],
                         ids=["static tensors", "CUDA graphs"])
def test_a_larger_bucket_grows_the_static_tensors_and_every_bucket_is_captured_again(cuda_graphs):
    shape = dataclasses.replace(SHAPE, device=models.DEVICE) if cuda_graphs else SHAPE
    cache, decodes = cache_with([40, 50, 9], shape=shape)
    captured = CapturedSteps(rows_summed, cache, cuda_graphs=cuda_graphs)
    captured.run(*step_inputs(decodes[:1]), decodes[:1])
    captured.run(*step_inputs(decodes), decodes)  # more rows: the buffers grow

    assert captured.buckets == [Bucket(4, BLOCK_TOKENS)]
    replayed = captured.run(*step_inputs(decodes[:1]), decodes[:1])
    assert captured.refused is None and captured.num_captures == 3
    torch.testing.assert_close(replayed[0], uncaptured(cache, decodes[:1])[0])


def test_a_bucket_beyond_the_caches_budget_is_left_to_the_uncaptured_step():
    # One group of two rows, 5 blocks each: the whole budget. Their bucket: 2 rows of 8 blocks.
    cache, decodes = cache_with([5 * BLOCK_TOKENS - 10, 40], max_tokens=10 * BLOCK_TOKENS)
    captured = CapturedSteps(rows_summed, cache, cuda_graphs=False)

    assert captured.run(*step_inputs(decodes), decodes) is None
    assert captured.run(*step_inputs(decodes[:1]), decodes[:1]) is not None
    assert captured.buckets == [Bucket(1, 8 * BLOCK_TOKENS)]


def test_a_steps_logits_stay_as_they_were_after_the_next_replay():
    cache, decodes = cache_with([40, 50])
    captured = CapturedSteps(rows_summed, cache, cuda_graphs=False)
    first = captured.run(*step_inputs(decodes), decodes)
    kept = [tensor.clone() for tensor in first[:2]]
    captured.run(torch.tensor([900, 901]), step_inputs(decodes)[1], decodes)

    assert torch.equal(first[0], kept[0]) and torch.equal(first[1], kept[1])


def test_a_step_the_compiled_code_refuses_is_not_captured():
    cache, decodes = cache_with([40])
    calls = []
    captured = CapturedSteps(lambda *inputs: calls.append(inputs), cache, cuda_graphs=False)  # None: refused

    assert captured.run(*step_inputs(decodes), decodes) is None
    assert captured.run(*step_inputs(decodes), decodes) is None  # not asked again
    assert captured.buckets == [] and captured.refused is None and len(calls) == 1


def test_a_capture_that_fails_leaves_every_later_step_uncaptured_and_says_why():
    cache, decodes = cache_with([40])

    def failing(*inputs):
        raise RuntimeError("operation not permitted when stream is capturing")

    captured = CapturedSteps(failing, cache, cuda_graphs=True)  # (without CUDA it fails before the call)

    assert captured.run(*step_inputs(decodes), decodes) is None
    assert captured.refused
    assert captured.run(*step_inputs(decodes), decodes) is None and captured.num_captures == 0


@pytest.fixture(scope="module", params=[CaptureMode.CALLS, pytest.param(CaptureMode.AUTO, marks=needs_cuda)],
                ids=["static tensors", "CUDA graphs"])
def replayed(request):
    """An engine on the tiny Llama in float64 whose compiled steps (attention as products and sums,
    as on a GPU) run through the buckets' static tensors; two rows a cache group."""
    model = models.tiny_model("llama")
    engine = models.engine(model, max_running=4, prefill_chunk=16, prefill_chunk_idle=16, cache_group_size=2,
                           compile_mode=CompileMode.ON, native_step=False, capture=request.param)
    return engine, models.copy_of(model)


@pytest.mark.process
def test_compiled_steps_replayed_per_bucket_answer_as_transformers_does_each_sequence_alone(replayed):
    engine, reference = replayed
    graph = engine.runner.graph
    assert graph.captured is not None and not graph.module.own_attention
    rng = random.Random(8)
    # Three streams over two groups (a bucket of four rows), one past a block's end (two blocks).
    for request_id, length in [("a", 9), ("b", 60), ("c", 3)]:
        engine.add_request(request_id, [rng.randrange(3, 49152) for _ in range(length)], SamplingParams(max_tokens=8))
    fed = models.record_logits(engine)
    while engine.has_work():
        engine.step()

    models.assert_as_alone(fed, reference, tolerance=1e-4)
    assert len(fed) == 3 * 8
    assert graph.captured.num_replays > 0 and graph.captured.refused is None and graph.num_fallbacks == 0
    stats = engine.stats()
    assert stats.num_replayed_steps == graph.captured.num_replays <= stats.num_compiled_steps == graph.num_steps
    assert {bucket.length for bucket in graph.captured.buckets} >= {2 * BLOCK_TOKENS}
