"""Attention over the KV cache for one packed step: where each token writes and reads.

The layout of a step (which cache row each token writes to, which rows decode together, which
prompt chunks attend alone) is worked out once per step and is the same for every layer. Decode
tokens of one cache group attend in one batched call over a plain slice of the group's tensors;
prompt chunks attend one sequence at a time. `attend` serves both forwards: transformers' own,
through the attention interface registered here, and the fused Llama forward.
"""

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

from .kv_cache import KVCache

ATTENTION_NAME = "chatapp_cache_rows"


@dataclass
class GroupWrite:
    group: int
    tokens: torch.Tensor  # indices into the step's tokens
    # Where each (token, kv head) lands in the group's layer viewed as [rows*heads*capacity, dim].
    places: torch.Tensor


@dataclass
class GroupDecode:
    group: int
    first_token: int  # the group's decode tokens are side by side in the step
    count: int
    first_row: int  # attention runs over the rows first_row .. first_row + span
    span: int
    rows: torch.Tensor | None  # offsets within the span when they are not simply 0..count-1
    length: int  # keys to attend over: the longest sequence in this step's rows
    mask: torch.Tensor | None  # [span, 1, 1, length]; None when every row sees every key


@dataclass
class PromptChunk:
    group: int
    row: int
    first_token: int
    count: int
    end: int  # keys to attend over
    mask: torch.Tensor | None  # None: plainly causal (the chunk starts the sequence)


@dataclass
class StepLayout:
    """Where each token of the step reads and writes; the same for every layer."""

    cache: KVCache
    writes: list[GroupWrite] = field(default_factory=list)
    decodes: list[GroupDecode] = field(default_factory=list)
    prompts: list[PromptChunk] = field(default_factory=list)


def _attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
               chatapp_step: StepLayout | None = None, **_):
    """transformers' attention interface: query [1, heads, T, dim]; returns [1, T, heads, dim]."""
    if chatapp_step is None:
        raise RuntimeError(f"{ATTENTION_NAME} attention runs only inside ModelRunner.run")
    output = attend(chatapp_step, module.layer_idx, query[0].transpose(0, 1),
                    key[0].transpose(0, 1), value[0].transpose(0, 1), scaling)
    return output.unsqueeze(0), None


def attend(step: StepLayout, layer: int, queries: torch.Tensor, new_keys: torch.Tensor,
           new_values: torch.Tensor, scaling: float | None) -> torch.Tensor:
    """Caches the step's keys and values, then attends; tensors are [T, heads, dim]."""
    cache = step.cache
    dim = queries.shape[-1]
    for write in step.writes:
        keys, values = cache.layer(write.group, layer)
        keys.view(-1, dim).index_copy_(0, write.places, new_keys.index_select(0, write.tokens).reshape(-1, dim))
        values.view(-1, dim).index_copy_(0, write.places, new_values.index_select(0, write.tokens).reshape(-1, dim))

    output = torch.empty_like(queries)
    for decode in step.decodes:
        keys, values = cache.layer(decode.group, layer)
        tokens = slice(decode.first_token, decode.first_token + decode.count)
        rows = slice(decode.first_row, decode.first_row + decode.span)
        if decode.rows is None:
            grouped = queries[tokens].unsqueeze(2)
        else:
            grouped = queries.new_zeros(decode.span, queries.shape[1], 1, dim)
            grouped.view(decode.span, -1).index_copy_(0, decode.rows, queries[tokens].reshape(decode.count, -1))
        attended = F.scaled_dot_product_attention(
            grouped, keys[rows, :, : decode.length], values[rows, :, : decode.length],
            attn_mask=decode.mask, scale=scaling, enable_gqa=True,
        )[:, :, 0]
        output[tokens] = attended if decode.rows is None else attended.index_select(0, decode.rows)
    for chunk in step.prompts:
        keys, values = cache.layer(chunk.group, layer)
        span = slice(chunk.first_token, chunk.first_token + chunk.count)
        attended = F.scaled_dot_product_attention(
            queries[span].transpose(0, 1).unsqueeze(0),
            keys[chunk.row : chunk.row + 1, :, : chunk.end],
            values[chunk.row : chunk.row + 1, :, : chunk.end],
            attn_mask=chunk.mask, is_causal=chunk.mask is None, scale=scaling, enable_gqa=True,
        )
        output[span] = attended[0].transpose(0, 1)
    return output


AttentionInterface.register(ATTENTION_NAME, _attention)
