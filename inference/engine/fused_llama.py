"""A Llama forward pass over one packed step, with fewer and larger operations than transformers'.

transformers' Llama runs three query/key/value projections, two MLP input projections, a
six-operation RMSNorm and a concatenating rotary embedding per layer: on a CPU the per-operation
overhead of those small matrices is a large part of a decode step. Here the projections are
fused (one matrix each for query+key+value and gate+up), the norm is torch's own, and rotary
reads precomputed tables and runs once over queries and keys together. Attention is the
runner's own over the same step layout.

Every matrix is stored transposed, [in, out], and multiplied as `x @ w`, or, where oneDNN's
packed layout reads weights faster on this CPU, packed once at load (matrices.py measures
which). Stored transposed, the output matrix saves about 3.5 ms of a 24 ms step at one stream
on an Intel Xeon and costs about as much at 16 (see BENCHMARKS.md). The transposed matrices
take the original weights' place (the model's modules keep views into them, the tied
embedding included), and packed ones replace them, so memory does not grow (but for a tied
output matrix, whose plain copy the embedding still reads).

Only plain Llama checkpoints qualify (no biases, SiLU); any other model keeps transformers'
forward through the runner's attention interface.
"""

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from . import matrix_choice
from .attention import StepLayout, attend
from .matrices import MatrixLayout, build, choose_dot_row_limit, packed_rows

# Rotary embeddings whose angles depend on the position alone, not on the sequence's length:
# their tables can be computed once.
STATIC_ROPE_TYPES = frozenset({"default", "linear", "llama3"})


@dataclass
class _Layer:
    # Matrices (matrices.py) are called with rows of their input width.
    attention_norm: torch.Tensor
    qkv: object  # [hidden, (heads + 2 * kv_heads) * head_dim]: queries, keys, values
    output: object
    mlp_norm: torch.Tensor
    gate_up: object  # [hidden, 2 * intermediate]: gate columns, then up columns
    down: object

    MATRICES = ("qkv", "output", "gate_up", "down")


def supports(model) -> bool:
    config = model.config
    return (
        type(model).__name__ == "LlamaForCausalLM"
        and not getattr(config, "attention_bias", False)
        and not getattr(config, "mlp_bias", False)
        and config.hidden_act == "silu"
    )


def has_static_rotary(model) -> bool:
    return getattr(model.model.rotary_emb, "rope_type", None) in STATIC_ROPE_TYPES


class FusedLlama:
    def __init__(self, model, layout: MatrixLayout = MatrixLayout.AUTO, cache_dir: Path | None = None):
        if not supports(model):
            raise ValueError(f"{type(model).__name__} is not a plain Llama model")
        if any(parameter.is_meta for parameter in model.parameters()):
            # A packing engine released them (matrices.py): its packed copies are its own.
            raise ValueError("this model's weights were released by the engine that packed them; "
                             "load the model again for another engine")
        base = model.model
        config = model.config
        tied = model.lm_head.weight is base.embed_tokens.weight
        self.lm_head = _share(model.lm_head)
        if tied:
            base.embed_tokens.weight = model.lm_head.weight
        else:
            _share(base.embed_tokens)
        self.embedding = base.embed_tokens.weight  # a view when tied: rows of the transposed head
        self.rotary = base.rotary_emb
        self.norm = _own(base.norm)
        self.eps = config.rms_norm_eps
        first = base.layers[0].self_attn
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = first.head_dim
        self.scaling = first.scaling
        self.layers = [self._fuse(layer) for layer in base.layers]
        self.layout = self._build_matrices(model, layout, tied, cache_dir)
        self.min_rows = max(getattr(layer.qkv, "min_rows", 1) for layer in self.layers)
        self.tables = None
        if has_static_rotary(model):
            every = torch.arange(config.max_position_embeddings, device=self.norm.device)
            self.tables = self._angles(every)

    @staticmethod
    def _fuse(layer) -> _Layer:
        attention, mlp = layer.self_attn, layer.mlp
        qkv = _share(attention.q_proj, attention.k_proj, attention.v_proj)
        gate_up = _share(mlp.gate_proj, mlp.up_proj)
        return _Layer(_own(layer.input_layernorm), qkv, _share(attention.o_proj),
                      _own(layer.post_attention_layernorm), gate_up, _share(mlp.down_proj))

    def _build_matrices(self, model, layout: MatrixLayout, tied: bool, cache_dir: Path | None) -> MatrixLayout:
        """Every matrix in the layout this machine multiplies fastest (timed here, or kept from
        an earlier start where the service has a cache directory); packed or [out, in] ones
        replace the plain."""
        weights = [getattr(layer, name) for layer in self.layers for name in _Layer.MATRICES]
        every = [*weights, self.lm_head]
        kept_at = matrix_choice.path_for(cache_dir, every) if layout is MatrixLayout.AUTO and cache_dir else None
        kept = matrix_choice.read(kept_at) if kept_at else None
        chosen, matrices, timed = build(kept.layout if kept else layout, every, cache_dir)
        limit = None
        if chosen is MatrixLayout.DOT:  # the output matrix multiplies few rows
            limit = choose_dot_row_limit(matrices[: len(weights)], kept.dot_row_limit if kept else None)
        if timed and kept_at:
            matrix_choice.write(kept_at, matrix_choice.MatrixChoice(chosen, limit, timed))
        for layer in self.layers:
            for name in _Layer.MATRICES:
                setattr(layer, name, matrices.pop(0))
        self.lm_head = matrices.pop(0)
        if chosen is MatrixLayout.DOT and tied:
            # The output matrix as [out, in] is the embedding itself: one copy serves both.
            model.model.embed_tokens.weight = nn.Parameter(self.lm_head.weight, requires_grad=False)
            self.embedding = self.lm_head.weight
        # A packed tied output matrix leaves its plain copy to the embedding, which reads its rows.
        embedding_reads_head = tied and chosen is MatrixLayout.PACKED
        if chosen in (MatrixLayout.PACKED, MatrixLayout.DOT):
            projections = [module for layer in model.model.layers
                           for module in (*layer.self_attn.children(), *layer.mlp.children())
                           if isinstance(module, nn.Linear)]
            if not embedding_reads_head:
                projections.append(model.lm_head)
            for module in projections:  # their plain weights would be a second copy
                module.weight = nn.Parameter(module.weight.to("meta"), requires_grad=False)
        return chosen

    def _angles(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin [T, 1, dim] of each position, sin negated over the first half of the dims.

        rotate_half(x) * sin equals halves_swapped(x) * that signed sin, exactly (a negation
        rounds nothing), and costs no concatenation.
        """
        cos, sin = self.rotary(self.norm, positions[None])
        half = self.head_dim // 2
        sin = torch.cat((-sin[0, :, :half], sin[0, :, half:]), dim=-1)
        return cos[0, :, None], sin[:, None]

    def __call__(self, token_ids: torch.Tensor, positions: torch.Tensor, sampled_at: torch.Tensor,
                 step: StepLayout) -> torch.Tensor:
        """token_ids, positions: [T]; returns the logits of the tokens at `sampled_at`."""
        count = self._rows(token_ids.shape[0])
        if count > token_ids.shape[0]:
            # Padded once for every product (matrices.py says why packed ones are); padded rows
            # attend to nothing and write no keys.
            padding = (0, count - token_ids.shape[0])
            token_ids, positions = F.pad(token_ids, padding), F.pad(positions, padding)
        hidden = F.embedding(token_ids, self.embedding)
        if self.tables is not None:
            cos, sin = (table.index_select(0, positions) for table in self.tables)
        else:
            cos, sin = self._angles(positions)
        rotated_heads = self.heads + self.kv_heads
        for index, layer in enumerate(self.layers):
            qkv = layer.qkv(self._norm(hidden, layer.attention_norm)).view(count, -1, self.head_dim)
            rotated = rotate(qkv[:, :rotated_heads], cos, sin)
            attended = attend(step, index, rotated[:, : self.heads], rotated[:, self.heads :],
                              qkv[:, rotated_heads:], self.scaling)
            hidden.add_(layer.output(attended.view(count, -1)))
            gate, up = layer.gate_up(self._norm(hidden, layer.mlp_norm)).chunk(2, dim=-1)
            hidden.add_(layer.down(F.silu(gate).mul_(up)))
        sampled = sampled_at.shape[0]
        rows = self._rows(sampled)
        if rows > sampled:  # the output matrix, too, sees a few counts of rows: any row will do
            sampled_at = F.pad(sampled_at, (0, rows - sampled))
        logits = self.lm_head(self._norm(hidden.index_select(0, sampled_at), self.norm))
        return logits[:sampled]

    def _rows(self, count: int) -> int:
        """The rows the products are given for `count` (more only where the matrices are packed)."""
        if self.layout is not MatrixLayout.PACKED:
            return count
        return max(self.min_rows, packed_rows(count))

    def _norm(self, hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return rms_norm(hidden, weight, self.eps)


def rms_norm(hidden: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Llama's RMSNorm; the compiled decode step (decode_graph.py) runs the same."""
    if hidden.dtype == torch.float32:
        return F.rms_norm(hidden, weight.shape, weight, eps)
    # Every other dtype the way transformers does it: normalised in float32, scaled in the
    # model's dtype. torch 2.13's CPU rms_norm for bf16 strays far enough that the default
    # model's greedy answer to "What is the capital of France?" became "L'Étoile, ..."
    # (tests/inference/test_precision.py); float64 narrows here, as the tests' reference does.
    wide = hidden.float()
    wide = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + eps)
    return weight * wide.to(hidden.dtype)


def rotate(heads: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of [T, heads, dim] by the tables' rows (`_angles`: sin signed so that a
    swap of the halves replaces rotate_half)."""
    swapped = heads.unflatten(-1, (2, heads.shape[-1] // 2)).flip(-2).flatten(-2)
    return (heads * cos).add_(swapped.mul_(sin))


def _own(module: nn.Module) -> torch.Tensor:
    """The module's weight, copied into memory of the process's own.

    A tensor loaded from a safetensors file keeps the whole file mapped, and every page of it
    read so far counts in the process's memory: once the matrices are copied, the norms are the
    last tensors that would hold it.
    """
    module.weight = nn.Parameter(module.weight.detach().clone(), requires_grad=False)
    return module.weight


def _share(*projections: nn.Module) -> torch.Tensor:
    """One [in, out] matrix of the projections' weights transposed side by side.

    Each projection's weight becomes a view into it (a transposed one, as transformers' own
    forward takes it), so the model holds one copy.
    """
    weights = [projection.weight.detach() for projection in projections]
    shared = weights[0].new_empty(weights[0].shape[1], sum(weight.shape[0] for weight in weights))
    first = 0
    for projection, weight in zip(projections, weights):
        rows = weight.shape[0]
        shared[:, first : first + rows].copy_(weight.t())
        projection.weight = nn.Parameter(shared[:, first : first + rows].t(), requires_grad=False)
        first += rows
    return shared
