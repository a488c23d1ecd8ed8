"""The decode step's arithmetic as the compiled graph traces it (decode_graph.py compiles and
calls it): the fused forward's arithmetic for decode tokens, the cache read-only, attention
through our own kernel's table or as products and sums over a gathered batch."""

import torch
import torch.nn.functional as F
from torch import nn

from . import group_view, matrices
from .fused_llama import rms_norm, rotate
from .matrices import MatrixLayout
from .sampler import greedy


class GraphStep(nn.Module):
    """The fused forward's arithmetic for decode tokens, with the cache read-only, on the fused
    forward's own tensors: its matrices as they are (oneDNN's packed layout where it packed them,
    [out, in] for our own kernel, [in, out] otherwise), its norms, embedding and rotary tables."""

    def __init__(self, fused, own_attention: bool):
        super().__init__()
        self.layout = fused.layout
        # Our own attention kernel where the runner found it runs (own_kernels.attends), else
        # products and sums.
        self.own_attention = own_attention
        # Buffers, not parameters: a packed matrix is an opaque oneDNN tensor. Under freezing
        # they become the graph's constants, the same tensors, not copies.
        self.register_buffer("embedding", fused.embedding)
        self.layers = nn.ModuleList()
        for fused_layer in fused.layers:
            layer = nn.Module()
            for name in ("attention_norm", "mlp_norm"):
                layer.register_buffer(name, getattr(fused_layer, name))
            for name in fused_layer.MATRICES:
                layer.register_buffer(name, matrices.tensor_of(getattr(fused_layer, name)))
            self.layers.append(layer)
        self.register_buffer("norm", fused.norm)
        self.register_buffer("head", matrices.tensor_of(fused.lm_head))
        cos, sin = fused.tables
        self.register_buffer("cos", cos)
        self.register_buffer("sin", sin)
        self.eps = fused.eps
        self.heads, self.kv_heads, self.head_dim = fused.heads, fused.kv_heads, fused.head_dim
        self.scaling = fused.scaling

    def forward(self, token_ids: torch.Tensor, positions: torch.Tensor,
                cache: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """token_ids, positions [B]; the keys and values cached before this step: with our own
        attention, (table,), where each row's are (decode_attention_rows' table [B, 6]: the rows
        may lie in different cache groups); else (keys, values), [layers, B, kv_heads, length,
        dim] each (a row's keys at and beyond its position are masked).

        Returns the logits [B, vocab], each row's argmax (its greedy token: sampler.StepLogits;
        by the sampler's blocks, whose maxima inductor vectorises: a plain argmax took 1.2 ms at
        64 rows) and the step's keys and values [layers, B, kv_heads, dim].
        """
        count, heads, kv_heads, dim = token_ids.shape[0], self.heads, self.kv_heads, self.head_dim
        group = heads // kv_heads
        hidden = F.embedding(token_ids, self.embedding)
        cos, sin = self.cos[positions], self.sin[positions]
        mask = None if self.own_attention else group_view.mask(positions, cache[0].shape[3], hidden.dtype)
        new_keys, new_values = [], []
        for index, layer in enumerate(self.layers):
            qkv = self._product(rms_norm(hidden, layer.attention_norm, self.eps), layer.qkv).view(count, -1, dim)
            rotated = rotate(qkv[:, : heads + kv_heads], cos, sin)
            queries = rotated[:, :heads].reshape(count, kv_heads, group, dim)
            key, value = rotated[:, heads:], qkv[:, heads + kv_heads :]
            new_keys.append(key)
            new_values.append(value)
            attended = self._attend(index, queries, cache, positions, mask, key, value)
            hidden = hidden + self._product(attended.reshape(count, heads * dim), layer.output)
            gate, up = self._product(rms_norm(hidden, layer.mlp_norm, self.eps), layer.gate_up).chunk(2, dim=-1)
            hidden = hidden + self._product(F.silu(gate) * up, layer.down)
        logits = self._product(rms_norm(hidden, self.norm, self.eps), self.head)
        return logits, greedy(logits), torch.stack(new_keys), torch.stack(new_values)

    def _product(self, rows: torch.Tensor, matrix: torch.Tensor) -> torch.Tensor:
        """rows @ a weight matrix: the call PackedMatrix or DotMatrix makes (inductor calls it
        from the generated code), or a plain [in, out] product."""
        if self.layout is MatrixLayout.PACKED:
            return torch.ops.mkldnn._linear_pointwise(rows, matrix, None, "none", [], "")
        if self.layout is MatrixLayout.DOT:
            return torch.ops.chatapp.dot_rows(rows, matrix)
        return rows @ matrix

    def _attend(self, layer: int, queries, cache, positions, mask, key, value) -> torch.Tensor:
        """queries [B, kv_heads, group, dim] over a layer's cached keys (a row's first `positions`
        of them) and the step's own key, in float32 at least (float64 stays float64).

        Our own kernel where it runs (kernels/decode_attention.cpp): inductor's loops for the
        products and sums below took about 24 ns per key and query head, one thread (BENCHMARKS.md).
        Else written as products and sums, not as a call to an attention kernel: inductor fuses
        them into a few loops over the cache, converting as they read. A decode step has a few
        queries a head, and torch's CPU flash attention cost about 100 us a layer for four rows
        over 140 keys (its calls' fixed cost mostly). In turns in one process (bf16, an AMD EPYC
        with AVX-512, two runs): steps 6-9% shorter at one stream and 1-8% at four over
        100-token contexts, 22% and 19% over 1,000 (BENCHMARKS.md).
        """
        if self.own_attention:
            table, = cache
            return torch.ops.chatapp.decode_attention_rows(queries, table, layer, positions, key, value, self.scaling)
        keys, values = cache[0][layer], cache[1][layer]
        wide = torch.promote_types(queries.dtype, torch.float32)
        scaled = queries.to(wide) * self.scaling
        # [B, kv_heads, group, length]
        cached = (scaled[:, :, :, None, :] * keys[:, :, None].to(wide)).sum(-1) + mask
        own = (scaled * key.to(wide)[:, :, None, :]).sum(-1)  # [B, kv, group]
        top = torch.maximum(cached.amax(-1), own)
        cached_weights, own_weight = torch.exp(cached - top[..., None]), torch.exp(own - top)
        merged = ((cached_weights[..., None] * values[:, :, None].to(wide)).sum(-2)
                  + value.to(wide)[:, :, None, :] * own_weight[..., None])
        total = cached_weights.sum(-1) + own_weight
        return (merged / total[..., None]).to(queries.dtype)
