"""Our own decode attention (kernels/decode_attention.cpp) attends as softmax over the keys a row
sees does, for every row's count of cached keys, read in place from the cache through a table of
where each row's keys lie (row_table.py); the step's own keys and values are stored through it."""

from dataclasses import dataclass

import pytest
import torch

from inference.engine import own_kernels
from inference.engine.row_table import row_table

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


@dataclass
class Step:
    """A decode step's queries, own keys and values and positions, and the cache it reads: one
    layer's keys and values [rows, kv_heads, length, dim] (views of the cache's tensors) and the
    table the kernel finds them through."""

    queries: torch.Tensor
    keys: torch.Tensor
    values: torch.Tensor
    positions: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    table: torch.Tensor
    layer: int
    cache: torch.Tensor  # [keys and values, layers, rows, kv_heads, capacity, dim]

    def attended(self, scaling: float) -> torch.Tensor:
        return torch.ops.chatapp.decode_attention_rows(self.queries, self.table, self.layer, self.positions,
                                                       self.key, self.value, scaling)

    def expected(self, scaling: float) -> torch.Tensor:
        return softmax_attention(self.queries, self.keys, self.values, self.positions, self.key, self.value,
                                 scaling)


def a_cache_and_a_step(dtype, dim, positions, length=50, kv_heads=3, group=3) -> Step:
    """A step over rows 1.. of a cache group ([layers, rows, kv_heads, capacity, dim]), layer 1."""
    rows = len(positions)
    cache = torch.randn(2, 2, rows + 1, kv_heads, length + 7, dim, dtype=dtype)
    keys, values = cache
    table = row_table([(keys, values, range(1, rows + 1))])
    queries = torch.randn(rows, kv_heads, group, dim, dtype=dtype) * 3
    key = torch.randn(rows, kv_heads + 1, dim, dtype=dtype)[:, 1:]  # a view, as the step's are
    value = torch.randn(rows, kv_heads, dim, dtype=dtype)
    return Step(queries, keys[1, 1:, :, :length], values[1, 1:, :, :length], torch.tensor(positions), key, value,
                table, 1, cache)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dim", [64, 40])  # a head size the kernel unrolls, and another
def test_each_row_attends_to_the_keys_before_its_position_and_its_own(dtype, dim):
    step = a_cache_and_a_step(dtype, dim, positions=[0, 1, 17, 50])

    attended = step.attended(0.125)

    assert attended.dtype == dtype and attended.shape == step.queries.shape
    torch.testing.assert_close(attended.double(), step.expected(0.125), rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize(("positions", "group"), [
    ([1000], 3),  # a lone stream's long context: its keys split into stretches among the threads
    ([0, 700, 3], 1),  # rows of very different lengths, one query a key head
    ([40] * 20, 8),  # more rows than threads, a wide group
])
def test_long_and_uneven_contexts_attend_as_one_softmax(dtype, positions, group):
    step = a_cache_and_a_step(dtype, 128, positions=positions, length=max(positions), group=group)

    attended = step.attended(0.088)

    torch.testing.assert_close(attended.double(), step.expected(0.088), rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


@pytest.mark.parametrize("threads", [1, 3])
def test_the_answer_does_not_depend_on_the_threads_sharing_it(threads):
    step = a_cache_and_a_step(torch.float32, 64, positions=[900, 5], length=900)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        attended = step.attended(0.125)
    finally:
        torch.set_num_threads(before)

    torch.testing.assert_close(attended.double(), step.expected(0.125), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_rows_found_through_a_table_in_different_tensors_attend_as_each_alone(dtype):
    """Streams in different cache groups ([layers, rows, kv_heads, capacity, dim] each, their
    capacities different), one call for a layer of all of them."""
    layers, kv_heads, group, dim = 3, 3, 3, 64
    small = torch.randn(2, layers, 2, kv_heads, 64, dim, dtype=dtype)
    large = torch.randn(2, layers, 4, kv_heads, 640, dim, dtype=dtype)
    rows = [(small, 1, 20), (large, 0, 600), (large, 3, 0), (small, 0, 63)]  # (group, row, position)
    queries = torch.randn(len(rows), kv_heads, group, dim, dtype=dtype) * 3
    key, value = torch.randn(len(rows), kv_heads, dim, dtype=dtype), torch.randn(len(rows), kv_heads, dim, dtype=dtype)
    positions = torch.tensor([position for _, _, position in rows])
    layer = 2

    table = torch.cat([row_table([(cache[0], cache[1], [row])]) for cache, row, _ in rows])
    attended = torch.ops.chatapp.decode_attention_rows(queries, table, layer, positions, key, value, 0.125)

    for index, (cache, row, position) in enumerate(rows):
        one = (queries[index : index + 1], cache[0, layer, row : row + 1], cache[1, layer, row : row + 1],
               positions[index : index + 1], key[index : index + 1], value[index : index + 1])
        torch.testing.assert_close(attended[index : index + 1].double(), softmax_attention(*one, 0.125),
                                   rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_a_steps_keys_and_values_are_stored_through_the_table_at_each_rows_position_alone(dtype):
    layers, kv_heads, dim = 3, 3, 64
    small = torch.randn(2, layers, 2, kv_heads, 64, dim, dtype=dtype)
    large = torch.randn(2, layers, 4, kv_heads, 640, dim, dtype=dtype)
    rows = [(small, 1, 20), (large, 0, 600), (large, 3, 0), (small, 0, 63)]  # (group, row, position)
    table = torch.cat([row_table([(cache[0], cache[1], [row])]) for cache, row, _ in rows])
    positions = torch.tensor([position for _, _, position in rows])
    new_keys = torch.randn(layers, len(rows), kv_heads, dim, dtype=dtype)
    new_values = torch.randn(layers, len(rows), kv_heads, dim, dtype=dtype)
    expected = {id(cache): cache.clone() for cache in (small, large)}
    for index, (cache, row, position) in enumerate(rows):
        expected[id(cache)][0, :, row, :, position] = new_keys[:, index]
        expected[id(cache)][1, :, row, :, position] = new_values[:, index]

    torch.ops.chatapp.store_rows(table, positions, new_keys, new_values)

    assert torch.equal(small, expected[id(small)]) and torch.equal(large, expected[id(large)])


def test_a_position_outside_a_rows_cache_is_refused_before_anything_is_written():
    cache = torch.zeros(2, 2, 2, 3, 16, 64)
    table = row_table([(cache[0], cache[1], [0, 1])])
    new = torch.ones(2, 2, 3, 64)

    with pytest.raises(RuntimeError, match="row 1's position 16 is outside its cache"):
        torch.ops.chatapp.store_rows(table, torch.tensor([3, 16]), new, new)

    assert not cache.any()


def test_a_table_of_another_shape_is_refused_with_a_clear_error():
    step = a_cache_and_a_step(torch.float32, 64, positions=[3, 4])

    with pytest.raises(RuntimeError, match="a table of 6 int64 a row"):
        torch.ops.chatapp.decode_attention_rows(step.queries, step.table[:, :5].contiguous(), 1, step.positions,
                                                step.key, step.value, 0.125)


def test_a_layer_beyond_the_rows_cache_is_refused_before_anything_is_read_or_written():
    step = a_cache_and_a_step(torch.float32, 64, positions=[3, 4])  # a cache of two layers
    new = torch.ones(2, 2, 3, 64)
    before = step.cache.clone()

    with pytest.raises(RuntimeError, match="row 0 holds 2 layers, not 2..2"):
        torch.ops.chatapp.decode_attention_rows(step.queries, step.table, 2, step.positions, step.key, step.value,
                                                0.125)
    with pytest.raises(RuntimeError, match="row 0 holds 2 layers, not 1..2"):
        torch.ops.chatapp.store_rows(step.table, step.positions, new, new, 1)

    assert torch.equal(step.cache, before)


def test_one_layers_keys_and_values_are_stored_at_that_layer_alone():
    step = a_cache_and_a_step(torch.float32, 64, positions=[3, 4])  # rows 1 and 2, layer 1
    new_keys, new_values = torch.randn(1, 2, 3, 64), torch.randn(1, 2, 3, 64)
    expected = step.cache.clone()
    expected[0, 1, 1, :, 3], expected[0, 1, 2, :, 4] = new_keys[0, 0], new_keys[0, 1]
    expected[1, 1, 1, :, 3], expected[1, 1, 2, :, 4] = new_values[0, 0], new_values[0, 1]

    torch.ops.chatapp.store_rows(step.table, step.positions, new_keys, new_values, 1)

    assert torch.equal(step.cache, expected)


def test_keys_beyond_a_rows_position_are_not_read():
    step = a_cache_and_a_step(torch.float32, 64, positions=[5, 9])
    step.keys[0, :, 5:] = float("nan")  # what a row must not see
    step.values[1, :, 9:] = float("nan")

    attended = step.attended(0.125)

    assert not attended.isnan().any()


def test_large_scores_do_not_overflow():
    # Fixed inputs: scores in the thousands are rounded to float32 at about 1e-3, so where two
    # top scores of random keys come that close the weights differ from float64's (a tie of the
    # data, not an overflow); the other tests' draws would otherwise choose the keys here.
    torch.manual_seed(23)
    step = a_cache_and_a_step(torch.float32, 64, positions=[30])
    step.queries *= 1000

    attended = step.attended(1.0)

    torch.testing.assert_close(attended.double(), step.expected(1.0), rtol=1e-5, atol=1e-5)


def test_a_position_missing_for_a_row_is_refused_with_a_clear_error():
    step = a_cache_and_a_step(torch.float32, 64, positions=[3, 4])

    with pytest.raises(RuntimeError, match="one position a row"):
        torch.ops.chatapp.decode_attention_rows(step.queries, step.table, 1, step.positions[:1], step.key,
                                                step.value, 0.125)


def test_queries_of_another_precision_than_the_steps_keys_are_refused_with_a_clear_error():
    step = a_cache_and_a_step(torch.float32, 64, positions=[3])

    with pytest.raises(RuntimeError, match="float32 or bfloat16, the queries as the cache"):
        torch.ops.chatapp.decode_attention_rows(step.queries.bfloat16(), step.table, 1, step.positions, step.key,
                                                step.value, 0.125)
