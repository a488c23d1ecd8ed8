"""The KV cache reserves room per sequence, groups rows by length, and gives memory back."""

import pytest
import torch

from inference.engine.kv_cache import BLOCK_TOKENS, CacheShape, KVCache


def cache(max_tokens=65536, max_rows=8, group_size=4) -> KVCache:
    shape = CacheShape(num_layers=2, num_kv_heads=2, head_dim=8, dtype=torch.float32,
                       device=torch.device("cpu"))
    return KVCache(shape, max_tokens=max_tokens, max_rows=max_rows, group_size=group_size)


def test_the_budget_bounds_the_memory_actually_allocated():
    kv = cache(max_tokens=4 * BLOCK_TOKENS, group_size=2)

    kv.allocate(1)  # opens a group of two rows, one block each
    kv.allocate(BLOCK_TOKENS)  # the group's second row

    assert kv.num_allocated_tokens == 2 * BLOCK_TOKENS
    assert kv.num_reserved_tokens == 2 * BLOCK_TOKENS
    assert kv.can_allocate(BLOCK_TOKENS)  # a second group of two blocks fills the budget
    assert not kv.can_allocate(BLOCK_TOKENS + 1)  # two rows of two blocks would not fit
    assert kv.max_sequence_tokens == 2 * BLOCK_TOKENS


def test_rows_run_out_before_tokens_do():
    kv = cache(max_rows=2, group_size=2)
    kv.allocate(10)
    kv.allocate(10)

    assert not kv.can_allocate(10)
    with pytest.raises(RuntimeError):
        kv.allocate(10)


def test_a_sequence_that_fits_no_group_opens_a_new_one_rather_than_growing_another():
    kv = cache()
    short = kv.allocate(50)
    long = kv.allocate(1000)

    assert long.group != short.group
    assert kv.groups[short.group].capacity == BLOCK_TOKENS


def test_a_sequence_takes_the_tightest_group_that_already_fits_it():
    kv = cache(group_size=2)
    long = kv.allocate(1000)
    kv.allocate(1000)  # fills the long group
    medium = kv.allocate(300)
    other_long = kv.allocate(1000)
    bytes_before = kv.num_allocated_bytes

    short = kv.allocate(200)

    assert len({long.group, medium.group, other_long.group}) == 3
    assert short.group == medium.group
    assert kv.num_allocated_bytes == bytes_before


def test_a_group_grows_to_fit_a_longer_member_and_keeps_what_it_held():
    # Too little budget for a second group: the first one must grow.
    kv = cache(max_tokens=5 * BLOCK_TOKENS, max_rows=2, group_size=2)
    first = kv.allocate(10)
    keys, _ = kv.layer(first.group, 0)
    keys[first.row, :, :5] = 1.0
    second = kv.allocate(100)

    keys, _ = kv.layer(first.group, 0)
    assert second.group == first.group
    assert keys.shape[2] == 2 * BLOCK_TOKENS
    assert torch.all(keys[first.row, :, :5] == 1.0)


def test_freeing_every_row_returns_all_memory():
    kv = cache()
    slots = [kv.allocate(n) for n in (10, 500, 70, 1000, 3)]
    assert kv.num_allocated_bytes > 0

    for slot in slots:
        kv.free(slot)

    assert kv.num_allocated_bytes == 0
    assert kv.num_reserved_tokens == 0
    assert kv.num_used_rows == 0


def _resident_bytes() -> int:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def test_a_reserved_group_holds_memory_only_for_the_tokens_written_and_reads_as_zeros():
    shape = CacheShape(num_layers=4, num_kv_heads=4, head_dim=64, dtype=torch.float32,
                       device=torch.device("cpu"))
    kv = KVCache(shape, max_tokens=4 * 16384, max_rows=4, group_size=4)
    before = _resident_bytes()

    slot = kv.allocate(16384)  # a group of 4 rows x 16384 tokens: 256 MiB of keys and values
    keys, values = kv.layer(slot.group, 0)
    keys[slot.row, :, :16] = 1.0  # one token page per head of one layer

    assert kv.num_allocated_bytes == 4 * 16384 * shape.bytes_per_token
    # Unwritten places read as zeros; reductions only, so that no full-size temporary is resident.
    assert float(keys.sum()) == 4 * 16 * 64 and float(values.min()) == float(values.max()) == 0.0
    assert _resident_bytes() - before < 16 * 2**20


def test_a_kept_row_keeps_its_keys_until_dropped_and_copies_them_into_another_row():
    kv = cache(group_size=2)
    kept = kv.allocate(100)
    keys, values = kv.layer(kept.group, 1)
    keys[kept.row, :, :10] = 1.5
    values[kept.row, :, :10] = -2.5
    kv.keep(kept, num_tokens=10)

    copy = kv.allocate(500)  # too long for the kept row's group: a group of its own
    kv.copy_prefix(kept, copy, 10)

    copied_keys, copied_values = kv.layer(copy.group, 1)
    assert copy.group != kept.group
    assert bool((copied_keys[copy.row, :, :10] == 1.5).all()) and bool((copied_values[copy.row, :, :10] == -2.5).all())
    assert kv.num_reserved_tokens == 512 and kv.num_kept_rows == 1
    assert not kv.can_adopt(kept, 500) and kv.can_adopt(kept, 120)
    kv.drop(kept)
    assert kv.num_kept_rows == 0 and kv.groups[kept.group] is None


def test_an_adopted_row_is_reserved_again_with_its_cached_keys_in_place():
    kv = cache()
    slot = kv.allocate(100)
    kv.layer(slot.group, 0)[0][slot.row, :, :5] = 3.0
    kv.keep(slot, num_tokens=5)

    kv.adopt(slot, 120)

    assert kv.num_kept_rows == 0 and kv.num_used_rows == 1 and kv.num_reserved_tokens == 128
    assert bool((kv.layer(slot.group, 0)[0][slot.row, :, :5] == 3.0).all())


def test_a_row_freed_in_a_group_that_stays_gives_its_pages_back_and_reads_as_zeros():
    kv = _big_rows_cache()
    stays, leaves = kv.allocate(16384), kv.allocate(16384)  # one group, 64 MiB a row
    for slot in (stays, leaves):
        for layer in range(4):
            for tensor in kv.layer(slot.group, layer):
                tensor[slot.row] = 1.0
    written = _resident_bytes()

    kv.free(leaves)

    assert kv.groups[stays.group] is not None
    assert written - _resident_bytes() > 48 * 2**20
    keys, values = kv.layer(leaves.group, 3)
    assert float(keys[leaves.row].abs().max()) == 0.0 == float(values[leaves.row].abs().max())
    assert float(kv.layer(stays.group, 3)[0][stays.row].min()) == 1.0


def test_a_dropped_kept_row_gives_its_pages_back_and_a_count_of_kept_tokens_is_kept():
    kv = _big_rows_cache()
    stays, kept = kv.allocate(16384), kv.allocate(16384)
    for layer in range(4):
        for tensor in kv.layer(kept.group, layer):
            tensor[kept.row] = 1.0
    kv.keep(kept, num_tokens=16000)
    assert kv.num_kept_tokens == 16000
    written = _resident_bytes()

    kv.drop(kept)

    assert kv.num_kept_tokens == 0 and kv.groups[stays.group] is not None
    assert written - _resident_bytes() > 48 * 2**20


def test_growing_a_group_copies_only_the_rows_in_use():
    kv = _big_rows_cache()
    slot = kv.allocate(8192)  # a group of 4 rows x 8192 tokens, 64 MiB a row
    kv.layer(slot.group, 0)[0][slot.row, :, :64] = 2.0
    before = _resident_bytes()

    # A new group of 4 x 16384 would exceed the budget: the group grows and takes it as its
    # second row. The one row in use is copied (64 MiB); the three free rows hold nothing.
    second = kv.allocate(16384)

    assert second.group == slot.group and kv.groups[slot.group].capacity == 16384
    assert float(kv.layer(slot.group, 0)[0][slot.row, :, :64].min()) == 2.0
    assert _resident_bytes() - before < 100 * 2**20  # not 4 x 64 MiB


def _big_rows_cache(max_tokens=4 * 16384) -> KVCache:
    shape = CacheShape(num_layers=4, num_kv_heads=4, head_dim=64, dtype=torch.float32,
                       device=torch.device("cpu"))
    return KVCache(shape, max_tokens=max_tokens, max_rows=4, group_size=4)
