"""One cache group's keys and values as the compiled step's products-and-sums attention reads
them (decode_graph.py, where our own attention kernel does not run: a GPU, float64): the rows'
mask, the cached length in whole blocks, and views as tensors of their own."""

import torch

from .kv_cache import BLOCK_TOKENS


def mask(positions: torch.Tensor, length: int, dtype: torch.dtype) -> torch.Tensor:
    """[B, 1, 1, length]: 0 where a row sees the cached key (before its position), else -inf."""
    visible = torch.arange(length, device=positions.device)[None, :] < positions[:, None]
    mask = torch.zeros(visible.shape, dtype=dtype, device=positions.device)
    return mask.masked_fill(~visible, float("-inf"))[:, None, None, :]


def alias(view: torch.Tensor) -> torch.Tensor:
    """The same memory as a tensor of its own, starting where the view starts: torch.compile
    guards a view's relation to its base (the group's whole tensor), which would tie the graph
    to one layout, and, under torch 2.11, an input's storage offset: compiled for rows from the
    group's second on (offset > 1), a step from its first row (offset 0) was refused, and on the
    lent GPU nearly every step ran through the fused forward (BENCHMARKS.md, the GPU section).
    DLPack hands over the view's first element as the start of a storage of its own."""
    return torch.from_dlpack(view)


def whole_blocks(tokens: int) -> int:
    return max(1, -(-tokens // BLOCK_TOKENS)) * BLOCK_TOKENS
