"""The cache as the compiled step's products-and-sums attention reads it (decode_graph.py, where
our own attention kernel does not run: a GPU, float64): the decoding rows' keys and values
gathered out of their groups, the rows' mask and the cached length in whole blocks."""

import torch

from .kv_cache import BLOCK_TOKENS


def mask(positions: torch.Tensor, length: int, dtype: torch.dtype) -> torch.Tensor:
    """[B, 1, 1, length]: 0 where a row sees the cached key (before its position), else -inf."""
    visible = torch.arange(length, device=positions.device)[None, :] < positions[:, None]
    mask = torch.zeros(visible.shape, dtype=dtype, device=positions.device)
    return mask.masked_fill(~visible, float("-inf"))[:, None, None, :]


def length(kv_cache, decodes) -> int:
    """The cached length a batch of these rows needs: the longest row's keys cached before this
    step in whole blocks (the shapes change once a block), no more than its groups hold."""
    longest = max(decode.length for decode in decodes) - 1
    return min(max(kv_cache.tensors(decode.group)[0].shape[3] for decode in decodes), whole_blocks(longest))


def gather(kv_cache, decodes) -> tuple[torch.Tensor, torch.Tensor]:
    """The decoding rows' cached keys and values, in the step's order, [layers, rows, kv_heads,
    length, dim] each, contiguous, a batch of their own (`length` above): zeros past a group's
    capacity (its rows are shorter: masked)."""
    shape = kv_cache.shape
    size = (shape.num_layers, sum(decode.count for decode in decodes), shape.num_kv_heads,
            length(kv_cache, decodes), shape.head_dim)
    keys = torch.zeros(size, dtype=shape.dtype, device=shape.device)
    values = torch.zeros_like(keys)
    gather_into(keys, values, kv_cache, decodes)
    return keys, values


def gather_into(keys: torch.Tensor, values: torch.Tensor, kv_cache, decodes) -> None:
    """Copies the decoding rows' cached keys and values into the batch's first rows, in the
    step's order, as far as the batch's length reaches (`keys.shape[3]`, at least `length`'s).
    Past a group's capacity the batch's rows are zeroed: masked, their weight is 0, and only a
    finite value times 0 is 0 (a captured step's batch holds earlier steps' rows there)."""
    reach = keys.shape[3]
    first = 0
    for decode in decodes:
        rows = slice(first, first + decode.count)
        for batch, cached in zip((keys, values), kv_cache.tensors(decode.group)):
            held = min(reach, cached.shape[3])
            batch[:, rows, :, :held] = cached[:, decode.rows, :, :held]
            if held < reach:
                batch[:, rows, :, held:] = 0
        first += decode.count


def whole_blocks(tokens: int) -> int:
    return max(1, -(-tokens // BLOCK_TOKENS)) * BLOCK_TOKENS
