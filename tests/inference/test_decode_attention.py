"""Our own decode attention (kernels/decode_attention.cpp) attends as softmax over the keys a row
sees does, for every row's count of cached keys, read in place from the cache's strides."""

import pytest
import torch

from inference.engine import own_kernels

pytestmark = pytest.mark.skipif(own_kernels.load() is not None,
                                reason=f"the kernel cannot run here: {own_kernels.load()}")

TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1e-2}


def softmax_attention(queries, keys, values, positions, key, value, scaling):
    """Each row's queries over its first positions[b] cached keys and its own, in float64."""
    out = torch.empty(queries.shape, dtype=torch.float64)
    for row, seen in enumerate(positions.tolist()):
        row_keys = torch.cat((keys[row, :, :seen], key[row, :, None]), dim=1).double()  # [kv, seen + 1, dim]
        row_values = torch.cat((values[row, :, :seen], value[row, :, None]), dim=1).double()
        scores = queries[row].double() @ row_keys.transpose(-1, -2) * scaling  # [kv, group, seen + 1]
        out[row] = scores.softmax(-1) @ row_values
    return out


def a_cache_and_a_step(dtype, dim, positions, length=50, kv_heads=3, group=3):
    """Keys and values as views of a larger cache ([layers, rows, kv_heads, capacity, dim]), as
    the decode step reads them, and the step's queries and own key and value."""
    rows = len(positions)
    cache = torch.randn(2, 2, rows + 1, kv_heads, length + 7, dim, dtype=dtype)
    keys, values = cache[0, 1, 1:, :, :length], cache[1, 1, 1:, :, :length]
    queries = torch.randn(rows, kv_heads, group, dim, dtype=dtype) * 3
    key = torch.randn(rows, kv_heads + 1, dim, dtype=dtype)[:, 1:]  # a view, as the step's are
    value = torch.randn(rows, kv_heads, dim, dtype=dtype)
    return queries, keys, values, torch.tensor(positions), key, value


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dim", [64, 40])  # a head size the kernel unrolls, and another
def test_each_row_attends_to_the_keys_before_its_position_and_its_own(dtype, dim):
    step = a_cache_and_a_step(dtype, dim, positions=[0, 1, 17, 50])

    attended = torch.ops.chatapp.decode_attention(*step, 0.125)

    assert attended.dtype == dtype and attended.shape == step[0].shape
    expected = softmax_attention(*step, 0.125)
    torch.testing.assert_close(attended.double(), expected, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize(("positions", "group"), [
    ([1000], 3),  # a lone stream's long context: its keys split into stretches among the threads
    ([0, 700, 3], 1),  # rows of very different lengths, one query a key head
    ([40] * 20, 8),  # more rows than threads, a wide group
])
def test_long_and_uneven_contexts_attend_as_one_softmax(dtype, positions, group):
    step = a_cache_and_a_step(dtype, 128, positions=positions, length=max(positions), group=group)

    attended = torch.ops.chatapp.decode_attention(*step, 0.088)

    expected = softmax_attention(*step, 0.088)
    torch.testing.assert_close(attended.double(), expected, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


@pytest.mark.parametrize("threads", [1, 3])
def test_the_answer_does_not_depend_on_the_threads_sharing_it(threads):
    step = a_cache_and_a_step(torch.float32, 64, positions=[900, 5], length=900)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        attended = torch.ops.chatapp.decode_attention(*step, 0.125)
    finally:
        torch.set_num_threads(before)

    torch.testing.assert_close(attended.double(), softmax_attention(*step, 0.125), rtol=1e-5, atol=1e-5)


def test_keys_beyond_a_rows_position_are_not_read():
    queries, keys, values, positions, key, value = a_cache_and_a_step(torch.float32, 64, positions=[5, 9])
    keys[0, :, 5:] = float("nan")  # what a row must not see
    values[1, :, 9:] = float("nan")

    attended = torch.ops.chatapp.decode_attention(queries, keys, values, positions, key, value, 0.125)

    assert not attended.isnan().any()


def test_large_scores_do_not_overflow():
    queries, keys, values, positions, key, value = a_cache_and_a_step(torch.float32, 64, positions=[30])
    queries *= 1000

    attended = torch.ops.chatapp.decode_attention(queries, keys, values, positions, key, value, 1.0)

    torch.testing.assert_close(attended.double(), softmax_attention(queries, keys, values, positions, key, value, 1.0),
                               rtol=1e-5, atol=1e-5)


def test_a_position_missing_for_a_row_is_refused_with_a_clear_error():
    queries, keys, values, positions, key, value = a_cache_and_a_step(torch.float32, 64, positions=[3, 4])

    with pytest.raises(RuntimeError, match="one position a row"):
        torch.ops.chatapp.decode_attention(queries, keys, values, positions[:1], key, value, 0.125)


def test_a_cache_of_another_precision_than_the_queries_is_refused_with_a_clear_error():
    queries, keys, values, positions, key, value = a_cache_and_a_step(torch.float32, 64, positions=[3])

    with pytest.raises(RuntimeError, match="float32 or bfloat16, the queries as the cache"):
        torch.ops.chatapp.decode_attention(queries.bfloat16(), keys, values, positions, key, value, 0.125)
