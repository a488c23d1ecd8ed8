"""A Llama forward pass over one packed step, with fewer and larger operations than transformers'.

transformers' Llama runs three query/key/value projections, two MLP input projections, a
six-operation RMSNorm and a concatenating rotary embedding per layer: on a CPU the per-operation
overhead of those small matrices is a large part of a decode step. Here the projections are
fused (one matrix each for query+key+value and gate+up), the norm is torch's own, and rotary
runs once over queries and keys together. The fused matrices take the original weights' place
(the model's modules keep views into them), so memory does not grow. Attention is the runner's
own over the same step layout.

Only plain Llama checkpoints qualify (no biases, SiLU); any other model keeps transformers'
forward through the runner's attention interface.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .attention import StepLayout, attend


@dataclass
class _Layer:
    attention_norm: torch.Tensor
    qkv: torch.Tensor  # [heads + 2 * kv_heads, ...] rows: queries, then keys, then values
    output: torch.Tensor
    mlp_norm: torch.Tensor
    gate_up: torch.Tensor  # gate rows, then up rows
    down: torch.Tensor


def supports(model) -> bool:
    config = model.config
    return (
        type(model).__name__ == "LlamaForCausalLM"
        and not getattr(config, "attention_bias", False)
        and not getattr(config, "mlp_bias", False)
        and config.hidden_act == "silu"
    )


class FusedLlama:
    def __init__(self, model):
        if not supports(model):
            raise ValueError(f"{type(model).__name__} is not a plain Llama model")
        base = model.model
        config = model.config
        self.embedding = base.embed_tokens.weight
        self.rotary = base.rotary_emb
        self.norm = base.norm.weight
        self.eps = config.rms_norm_eps
        self.lm_head = model.lm_head.weight
        first = base.layers[0].self_attn
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = first.head_dim
        self.scaling = first.scaling
        self.layers = [self._fuse(layer) for layer in base.layers]

    @staticmethod
    def _fuse(layer) -> _Layer:
        attention, mlp = layer.self_attn, layer.mlp
        qkv = _share(attention.q_proj, attention.k_proj, attention.v_proj)
        gate_up = _share(mlp.gate_proj, mlp.up_proj)
        return _Layer(layer.input_layernorm.weight, qkv, attention.o_proj.weight,
                      layer.post_attention_layernorm.weight, gate_up, mlp.down_proj.weight)

    def __call__(self, token_ids: torch.Tensor, positions: torch.Tensor, sampled_at: torch.Tensor,
                 step: StepLayout) -> torch.Tensor:
        """token_ids, positions: [T]; returns the logits of the tokens at `sampled_at`."""
        count = token_ids.shape[0]
        hidden = F.embedding(token_ids, self.embedding)
        cos, sin = self.rotary(hidden, positions[None])
        cos, sin = cos[0, :, None], sin[0, :, None]  # [T, 1, dim]: the same for every head
        rotated_heads = self.heads + self.kv_heads
        for index, layer in enumerate(self.layers):
            qkv = F.linear(self._norm(hidden, layer.attention_norm), layer.qkv)
            qkv = qkv.view(count, rotated_heads + self.kv_heads, self.head_dim)
            rotated = qkv[:, :rotated_heads]
            rotated = rotated * cos + _rotate_half(rotated) * sin
            attended = attend(step, index, rotated[:, : self.heads], rotated[:, self.heads :],
                              qkv[:, rotated_heads:], self.scaling)
            hidden = hidden + F.linear(attended.reshape(count, -1), layer.output)
            gate, up = F.linear(self._norm(hidden, layer.mlp_norm), layer.gate_up).chunk(2, dim=-1)
            hidden = hidden + F.linear(F.silu(gate) * up, layer.down)
        return F.linear(self._norm(hidden.index_select(0, sampled_at), self.norm), self.lm_head)

    def _norm(self, hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        if hidden.dtype == torch.float32:
            return F.rms_norm(hidden, weight.shape, weight, self.eps)
        # transformers normalises every other dtype in float32, then scales in the model's dtype.
        wide = hidden.float()
        wide = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * wide.to(hidden.dtype)


def _share(*projections: nn.Linear) -> torch.Tensor:
    """One matrix of the projections' rows; each projection's weight becomes a view into it."""
    fused = torch.cat([projection.weight.detach() for projection in projections])
    first = 0
    for projection in projections:
        rows = projection.weight.shape[0]
        projection.weight = nn.Parameter(fused[first : first + rows], requires_grad=False)
        first += rows
    return fused


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
