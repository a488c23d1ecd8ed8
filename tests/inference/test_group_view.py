"""What the compiled step's products-and-sums attention is given of a cache group (group_view.py)."""

import pytest
import torch

from inference.engine import group_view


@pytest.mark.parametrize("first_row", [0, 1, 3])
def test_a_groups_rows_reach_the_graph_as_a_tensor_of_their_own_starting_at_its_first_element(first_row):
    # [layers, rows, kv_heads, capacity, dim], as a cache group holds its keys.
    keys = torch.zeros(2, 5, 3, 48, 8)
    view = keys[:, first_row:first_row + 2, :, :32]

    given = group_view.alias(view)

    # Neither a view of the group nor offset into its storage: torch.compile guards both, and a
    # graph compiled for one first row was refused for another (torch 2.11, the lent GPU).
    assert given._base is None and given.storage_offset() == 0
    assert given.shape == view.shape and given.stride() == view.stride()
    given[1, 1, 2, 31] = 7.0
    assert keys[1, first_row + 1, 2, 31].eq(7.0).all()  # the cache's own memory, not a copy
