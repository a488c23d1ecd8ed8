"""What the compiled step's products-and-sums attention is given of the cache (group_view.py)."""

import torch

from inference.engine import group_view
from inference.engine.attention import GroupDecode
from inference.engine.kv_cache import BLOCK_TOKENS, CacheShape, KVCache


def decode_of(slot, cached: int) -> GroupDecode:
    """One decoding row's step: `cached` keys already in its row."""
    return GroupDecode(slot.group, 0, 1, torch.tensor([slot.row]), torch.tensor([cached]), slot.row, 1, None,
                       cached + 1, None)


def test_rows_of_several_groups_reach_the_graph_as_one_batch_of_their_own_in_the_steps_order():
    shape = CacheShape(num_layers=2, num_kv_heads=3, head_dim=8, dtype=torch.float32, device=torch.device("cpu"))
    cache = KVCache(shape, max_tokens=64 * BLOCK_TOKENS, max_rows=8, group_size=2)
    short, long, other = cache.allocate(BLOCK_TOKENS), cache.allocate(3 * BLOCK_TOKENS), cache.allocate(50)
    assert len({short.group, long.group}) == 2  # groups of different capacities
    for number, slot in enumerate((short, long, other), start=1):
        keys, values = cache.tensors(slot.group)
        keys[:, slot.row] = number
        values[:, slot.row] = -number

    # The long row first, then the short one.
    keys, values = group_view.gather(cache, [decode_of(long, 2 * BLOCK_TOKENS + 5), decode_of(short, 40)])

    # The longest row's keys in whole blocks; the short row's group ends sooner: zeros there.
    assert keys.shape == values.shape == (2, 2, 3, 3 * BLOCK_TOKENS, 8)
    assert keys.is_contiguous() and keys.storage_offset() == 0 and keys._base is None
    assert keys[:, 0].eq(2).all() and values[:, 0].eq(-2).all()
    assert keys[:, 1, :, :BLOCK_TOKENS].eq(1).all() and keys[:, 1, :, BLOCK_TOKENS:].eq(0).all()
    # A copy: the graph reads the batch while the step's own keys go into the cache.
    keys.zero_()
    assert cache.tensors(long.group)[0][:, long.row].eq(2).all()


def test_a_lone_rows_keys_reach_the_graph_cut_to_whole_blocks_past_its_cached_ones():
    shape = CacheShape(num_layers=2, num_kv_heads=3, head_dim=8, dtype=torch.float32, device=torch.device("cpu"))
    cache = KVCache(shape, max_tokens=64 * BLOCK_TOKENS, max_rows=8, group_size=4)
    cache.allocate(BLOCK_TOKENS)
    slot = cache.allocate(4 * BLOCK_TOKENS)  # not its group's first row
    cache.tensors(slot.group)[0][:, slot.row] = 7

    keys, values = group_view.gather(cache, [decode_of(slot, BLOCK_TOKENS + 1)])

    assert keys.shape == (2, 1, 3, 2 * BLOCK_TOKENS, 8) and keys.is_contiguous() and keys.storage_offset() == 0
    assert keys.eq(7).all() and values.eq(0).all()
