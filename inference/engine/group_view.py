"""The cache as the compiled step's products-and-sums attention reads it (decode_graph.py, where
our own attention kernel does not run: a GPU, float64): the decoding rows' keys and values
gathered out of their groups, the rows' mask and the cached length in whole blocks."""

import torch
import torch.nn.functional as F

from .kv_cache import BLOCK_TOKENS


def mask(positions: torch.Tensor, length: int, dtype: torch.dtype) -> torch.Tensor:
    """[B, 1, 1, length]: 0 where a row sees the cached key (before its position), else -inf."""
    visible = torch.arange(length, device=positions.device)[None, :] < positions[:, None]
    mask = torch.zeros(visible.shape, dtype=dtype, device=positions.device)
    return mask.masked_fill(~visible, float("-inf"))[:, None, None, :]


def gather(kv_cache, decodes) -> tuple[torch.Tensor, torch.Tensor]:
    """The decoding rows' cached keys and values, in the step's order, [layers, rows, kv_heads,
    length, dim] each, contiguous: `length` the longest row's cached keys in whole blocks (the
    shapes change once a block), zeros past a group's capacity (its rows are shorter: masked)."""
    longest = max(decode.length for decode in decodes) - 1  # keys cached before this step
    groups = [kv_cache.tensors(decode.group) for decode in decodes]
    length = min(max(keys.shape[3] for keys, _ in groups), whole_blocks(longest))
    parts = ([], [])
    for decode, tensors in zip(decodes, groups):
        for part, group_tensor in zip(parts, tensors):
            rows = group_tensor[:, decode.rows, :, :length]  # a copy: rows picked by index
            part.append(F.pad(rows, (0, 0, 0, length - rows.shape[3])) if rows.shape[3] < length else rows)
    if len(decodes) == 1:
        return parts[0][0].contiguous(), parts[1][0].contiguous()
    return torch.cat(parts[0], dim=1), torch.cat(parts[1], dim=1)


def whole_blocks(tokens: int) -> int:
    return max(1, -(-tokens // BLOCK_TOKENS)) * BLOCK_TOKENS
