"""Attention over the KV cache for one packed step: where each token writes and reads.

The layout of a step (which cache row each token writes to, which rows decode together, which
prompt chunks attend alone) is worked out once per step and is the same for every layer. Decode
tokens are stored and attend through our own kernel where it runs (a CPU, float32 or bfloat16):
all of a step's at once, wherever their rows lie, through one table of where each row's keys
are (row_table.py); elsewhere those of one cache group write their keys and values in one
indexed store and attend in one call over a plain slice of the group's tensors. Prompt chunks
write a plain slice of their row and attend one sequence at a time. `attend` serves both
forwards: transformers' own, through the attention interface registered here, and the fused
Llama forward.

A decode token has one query per head, and the query heads that share a key/value head see the
same keys under the same mask: they go to attention as that key/value head's queries, side by
side, so that no key or value is repeated per query head (torch's GQA path costs about 20 us
more per call, 10 ms of a step at 64 streams, see BENCHMARKS.md).
"""

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

from .kv_cache import KVCache

ATTENTION_NAME = "inference_cache_rows"


@dataclass
class GroupDecode:
    group: int
    first_token: int  # the group's decode tokens are side by side in the step
    count: int
    # Each token's cache row and position, where its key and value go (None where our attention
    # serves: the step's DecodeRows hold them).
    rows: torch.Tensor | None
    positions: torch.Tensor | None
    first_row: int  # attention runs over the rows first_row .. first_row + span
    span: int
    offsets: torch.Tensor | None  # the tokens' rows within the span when not simply 0..count-1
    length: int  # keys to attend over: the longest sequence in this step's rows
    # additive, [span, 1, 1, length]; None when every row sees every key or our attention serves
    mask: torch.Tensor | None


@dataclass
class DecodeRows:
    """Every decode token of a step, for our attention: the step's first `count` tokens."""

    table: torch.Tensor  # row_table's, a row for each token, in the tokens' order
    positions: torch.Tensor  # each token's position, where its key and value go
    count: int


@dataclass
class PromptChunk:
    group: int
    row: int
    first_token: int
    count: int
    end: int  # keys to attend over; the chunk's own keys are the last `count` of them
    mask: torch.Tensor | None  # additive; None: plainly causal (the chunk starts the sequence)


@dataclass
class StepLayout:
    """Where each token of the step reads and writes; the same for every layer."""

    cache: KVCache
    num_tokens: int  # the step's tokens; a forward may pad its rows beyond them
    decodes: list[GroupDecode] = field(default_factory=list)
    prompts: list[PromptChunk] = field(default_factory=list)
    rows: DecodeRows | None = None  # where our attention serves, its decode tokens' table


def _attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
               inference_step: StepLayout | None = None, **_):
    """transformers' attention interface: query [1, heads, T, dim]; returns [1, T, heads, dim]."""
    if inference_step is None:
        raise RuntimeError(f"{ATTENTION_NAME} attention runs only inside ModelRunner.run")
    output = attend(inference_step, module.layer_idx, query[0].transpose(0, 1),
                    key[0].transpose(0, 1), value[0].transpose(0, 1), scaling)
    return output.unsqueeze(0), None


def attend(step: StepLayout, layer: int, queries: torch.Tensor, new_keys: torch.Tensor,
           new_values: torch.Tensor, scaling: float | None) -> torch.Tensor:
    """Caches the step's keys and values, then attends; tensors are [T, heads, dim]."""
    cache = step.cache
    count = queries.shape[0]
    if not step.prompts and step.rows is not None and step.rows.count == count:
        return _attend_rows(step.rows, layer, queries, new_keys, new_values, scaling)
    alone = len(step.decodes) == 1 and step.decodes[0].count == count
    if not step.prompts and step.rows is None and alone:
        # The usual decode step: one group's tokens are the whole step, nothing to gather.
        return _attend_decode(step.decodes[0], cache, layer, queries, new_keys, new_values, scaling)
    # Rows beyond the step's tokens (the fused forward's padding) are zeros, not garbage.
    output = torch.empty_like(queries) if count == step.num_tokens else queries.new_zeros(queries.shape)
    if step.rows is not None:
        tokens = slice(0, step.rows.count)
        output[tokens] = _attend_rows(step.rows, layer, queries[tokens], new_keys[tokens],
                                      new_values[tokens], scaling)
    else:
        for decode in step.decodes:
            tokens = slice(decode.first_token, decode.first_token + decode.count)
            output[tokens] = _attend_decode(decode, cache, layer, queries, new_keys, new_values, scaling)
    for chunk in step.prompts:
        keys, values = cache.layer(chunk.group, layer)
        span = slice(chunk.first_token, chunk.first_token + chunk.count)
        places = slice(chunk.end - chunk.count, chunk.end)
        keys[chunk.row, :, places] = new_keys[span].transpose(0, 1)
        values[chunk.row, :, places] = new_values[span].transpose(0, 1)
        attended = F.scaled_dot_product_attention(
            queries[span].transpose(0, 1).unsqueeze(0),
            keys[chunk.row : chunk.row + 1, :, : chunk.end],
            values[chunk.row : chunk.row + 1, :, : chunk.end],
            attn_mask=chunk.mask, is_causal=chunk.mask is None, scale=scaling, enable_gqa=True,
        )
        output[span] = attended[0].transpose(0, 1)
    return output


def _attend_rows(rows: DecodeRows, layer: int, queries: torch.Tensor, new_keys: torch.Tensor,
                 new_values: torch.Tensor, scaling: float | None) -> torch.Tensor:
    """The step's decode tokens through our kernel: their keys and values stored, their attention
    [count, heads, dim]. Each row reads its own keys up to its position (no mask, no score for a
    key it does not see) and its new key and value as its own, wherever its cache group: a step
    of many groups costs two calls a layer (it had cost a dozen small operations a group and
    layer: at 64 streams, sixteen groups, some 5,000 a step with a prompt in it)."""
    count, heads, dim = queries.shape
    kv_heads = new_keys.shape[1]
    torch.ops.chatapp.store_rows(rows.table, rows.positions, new_keys[None], new_values[None],
                                 layer)
    attended = torch.ops.chatapp.decode_attention_rows(
        queries.reshape(count, kv_heads, heads // kv_heads, dim), rows.table, layer, rows.positions,
        new_keys, new_values, dim**-0.5 if scaling is None else scaling)
    return attended.view(count, heads, dim)


def _attend_decode(decode: GroupDecode, cache: KVCache, layer: int, queries: torch.Tensor,
                   new_keys: torch.Tensor, new_values: torch.Tensor,
                   scaling: float | None) -> torch.Tensor:
    """One group's decode tokens through torch's attention: their keys and values stored, their
    attention [count, heads, dim]."""
    keys, values = cache.layer(decode.group, layer)
    heads, dim = queries.shape[1:]
    kv_heads = new_keys.shape[1]
    tokens = slice(decode.first_token, decode.first_token + decode.count)
    # [rows, capacity, kv_heads, dim]: (row, position) picks one token's heads.
    keys.transpose(1, 2).index_put_((decode.rows, decode.positions), new_keys[tokens])
    values.transpose(1, 2).index_put_((decode.rows, decode.positions), new_values[tokens])
    rows = slice(decode.first_row, decode.first_row + decode.span)
    keys, values = keys[rows, :, : decode.length], values[rows, :, : decode.length]
    grouped = _spread(decode, queries[tokens].view(decode.count, kv_heads, heads // kv_heads, dim))
    attended = F.scaled_dot_product_attention(grouped, keys, values, attn_mask=decode.mask, scale=scaling)
    if decode.offsets is not None:
        attended = attended.index_select(0, decode.offsets)
    return attended.reshape(decode.count, heads, dim)


def _spread(decode: GroupDecode, per_token: torch.Tensor) -> torch.Tensor:
    """Per-token rows placed at their tokens' rows of the span (zeros between): attention runs
    over the span's rows."""
    if decode.offsets is None:
        return per_token
    spread = per_token.new_zeros((decode.span, *per_token.shape[1:]))
    return spread.index_copy_(0, decode.offsets, per_token)


AttentionInterface.register(ATTENTION_NAME, _attention)
