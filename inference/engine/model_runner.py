"""Runs one forward pass for a whole step: every scheduled token of every sequence, packed.

All new tokens of a step travel as one row `[1, T]` with their own positions, so the linear
layers see one matrix however the step mixes prompt chunks and decode tokens. Attention is
ours (registered with transformers' attention interface): it writes each token's keys and
values into its sequence's cache row, then attends per cache group for decode tokens (one
batched call) and per sequence for prompt chunks. Any transformers causal LM whose attention
goes through that interface (Llama, Mistral, Qwen, Gemma, ...) runs unchanged.
"""

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

from .kv_cache import KVCache
from .scheduler import ScheduledChunk

ATTENTION_NAME = "chatapp_cache_rows"


@dataclass
class _GroupWrite:
    group: int
    tokens: torch.Tensor  # indices into the step's tokens
    # Where each (token, kv head) lands in the group's layer viewed as [rows*heads*capacity, dim].
    places: torch.Tensor


@dataclass
class _GroupDecode:
    group: int
    first_token: int  # the group's decode tokens are side by side in the step
    count: int
    first_row: int  # attention runs over the rows first_row .. first_row + span
    span: int
    rows: torch.Tensor | None  # offsets within the span when they are not simply 0..count-1
    length: int  # keys to attend over: the longest sequence in this step's rows
    mask: torch.Tensor | None  # [span, 1, 1, length]; None when every row sees every key


@dataclass
class _PromptChunk:
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
    writes: list[_GroupWrite] = field(default_factory=list)
    decodes: list[_GroupDecode] = field(default_factory=list)
    prompts: list[_PromptChunk] = field(default_factory=list)


def _attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
               chatapp_step: StepLayout | None = None, **_):
    """query: [1, heads, T, dim]; key, value: [1, kv_heads, T, dim]; returns [1, T, heads, dim]."""
    if chatapp_step is None:
        raise RuntimeError(f"{ATTENTION_NAME} attention runs only inside ModelRunner.run")
    layer = module.layer_idx
    cache = chatapp_step.cache
    dim = query.shape[-1]
    new_keys = key[0].transpose(0, 1)  # [T, kv_heads, dim]
    new_values = value[0].transpose(0, 1)
    for write in chatapp_step.writes:
        keys, values = cache.layer(write.group, layer)
        keys.view(-1, dim).index_copy_(0, write.places, new_keys.index_select(0, write.tokens).reshape(-1, dim))
        values.view(-1, dim).index_copy_(0, write.places, new_values.index_select(0, write.tokens).reshape(-1, dim))

    queries = query[0].transpose(0, 1)  # [T, heads, dim]
    output = torch.empty_like(queries)
    for decode in chatapp_step.decodes:
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
    for chunk in chatapp_step.prompts:
        keys, values = cache.layer(chunk.group, layer)
        span = slice(chunk.first_token, chunk.first_token + chunk.count)
        attended = F.scaled_dot_product_attention(
            query[:, :, span],
            keys[chunk.row : chunk.row + 1, :, : chunk.end],
            values[chunk.row : chunk.row + 1, :, : chunk.end],
            attn_mask=chunk.mask, is_causal=chunk.mask is None, scale=scaling, enable_gqa=True,
        )
        output[span] = attended[0].transpose(0, 1)
    return output.unsqueeze(0), None


AttentionInterface.register(ATTENTION_NAME, _attention)


class ModelRunner:
    def __init__(self, model, kv_cache: KVCache):
        self.model = model
        self.kv_cache = kv_cache
        self.device = next(model.parameters()).device
        model.set_attn_implementation(ATTENTION_NAME)

    @torch.inference_mode()
    def run(self, chunks: list[ScheduledChunk]) -> torch.Tensor:
        """Feeds every chunk; returns logits [number of sampling chunks, vocab], in chunk order."""
        token_ids: list[int] = []
        positions: list[int] = []
        sampled_at: list[int] = []
        for chunk in chunks:
            token_ids.extend(chunk.token_ids)
            positions.extend(range(chunk.start, chunk.end))
            if chunk.samples:
                sampled_at.append(len(token_ids) - 1)
        layout = self._layout(chunks)
        output = self.model(
            input_ids=torch.tensor([token_ids], device=self.device),
            position_ids=torch.tensor([positions], device=self.device),
            use_cache=False,
            logits_to_keep=torch.tensor(sampled_at, device=self.device, dtype=torch.long),
            chatapp_step=layout,
        )
        for chunk in chunks:
            chunk.sequence.num_cached_tokens = chunk.end
        return output.logits[0]

    def _layout(self, chunks: list[ScheduledChunk]) -> StepLayout:
        layout = StepLayout(self.kv_cache)
        writes: dict[int, list[tuple[int, int, int]]] = {}  # group -> (token, row, position)
        decodes: dict[int, list[tuple[int, int, int]]] = {}  # group -> (token, row, length)
        first = 0
        for chunk in chunks:
            slot = chunk.sequence.slot
            count = len(chunk.token_ids)
            writes.setdefault(slot.group, []).extend(
                (first + i, slot.row, chunk.start + i) for i in range(count)
            )
            if not chunk.sequence.is_prefilling:
                decodes.setdefault(slot.group, []).append((first, slot.row, chunk.end))
            else:
                layout.prompts.append(_PromptChunk(
                    slot.group, slot.row, first, count, chunk.end,
                    None if chunk.start == 0 else self._chunk_mask(chunk.start, count),
                ))
            first += count
        for group, entries in writes.items():
            layout.writes.append(self._write(group, entries))
        for group, entries in decodes.items():
            layout.decodes.append(self._decode(group, entries))
        return layout

    def _write(self, group: int, entries: list[tuple[int, int, int]]) -> _GroupWrite:
        keys, _ = self.kv_cache.layer(group, 0)
        _, heads, capacity, _ = keys.shape
        tokens, rows, positions = (torch.tensor(column) for column in zip(*entries))
        places = (rows[:, None] * heads + torch.arange(heads)[None, :]) * capacity + positions[:, None]
        return _GroupWrite(group, tokens.to(self.device), places.flatten().to(self.device))

    def _decode(self, group: int, entries: list[tuple[int, int, int]]) -> _GroupDecode:
        """Decode tokens of one group; the scheduler put them side by side, in row order."""
        tokens, rows, lengths = zip(*entries)
        if list(tokens) != list(range(tokens[0], tokens[0] + len(tokens))) or list(rows) != sorted(set(rows)):
            raise RuntimeError("decode chunks must come grouped and in cache-row order")
        first_row, span = rows[0], rows[-1] - rows[0] + 1
        length = max(lengths)
        offsets = None
        if span != len(rows):
            offsets = torch.tensor([row - first_row for row in rows], device=self.device)
        mask = None
        if span != len(rows) or min(lengths) != length:
            limits = torch.ones(span, dtype=torch.long)  # rows not decoding see one key: no NaN
            limits[[row - first_row for row in rows]] = torch.tensor(lengths)
            mask = (torch.arange(length)[None, :] < limits[:, None]).view(span, 1, 1, length)
            mask = mask.to(self.device)
        return _GroupDecode(group, tokens[0], len(tokens), first_row, span, offsets, length, mask)

    def _chunk_mask(self, start: int, count: int) -> torch.Tensor:
        """Chunk token i (at position start + i) sees every key up to and including its own."""
        keys = torch.arange(start + count)[None, :]
        queries = torch.arange(start, start + count)[:, None]
        return (keys <= queries).to(self.device)

