"""A decode step as one call of our own C++ (kernels/decode_step.cpp): every layer in one parallel
region of the threads, no Python, dispatcher or allocation between the operations.

The compiled step (decode_graph.py) took the per-operation work out of Python's hands, but its
generated code still calls our products and attention one after another, each forking and
joining the threads, with inductor's small kernels and the wrapper's bookkeeping between them:
at one stream on a 2-core AMD EPYC, 2.2 ms of a 12.1 ms F32 step read no weights. Here the
threads enter once a step and wait for each other at barriers, and a step needs no compiler
and no warm-up: the library our kernels are built in (own_kernels.py) holds it.

A step whose rows all want only their greedy token reads the output matrix in a narrower copy
and computes in full only the few columns that could be the largest (decode_step.cpp's
`Screen`): the same greedy token, bit for bit, from fewer bytes a token. The copy is int8
levels with a scale a row where our kernels are built for AVX-512 (the default model's output
matrix in 28 MB, against 113 in float32 and 57 in bfloat16, the copy a float32 model had before
it), else float16 (F16C widens it to float32), for a float32 model; a bfloat16 model's is int8
levels. The model keeps the copy beside its own matrix; a sampled row needs every logit, so any
step with one reads the whole matrix. A float16 screen serves steps of at most two rows, where
a step reads its weights and does little else: with more, widening the weights costs more than
their bytes save (SCREENED_ROWS).

It runs where our products and attention both do: a plain Llama with static rotary tables, its
matrices in our layout (`MatrixLayout.DOT`), float32 or bfloat16, on a CPU. It takes the steps
the compiled graph would (decode tokens only, every one sampled) and has the same calls, so the
runner treats either as its decode step.
"""

import torch

from . import own_kernels
from .attention import GroupDecode, StepLayout
from .matrices import MatrixLayout, tensor_of
from .sampler import StepLogits

# What the C++ multiplies (decode_step.cpp, as dot_rows.cpp).
DTYPES = (torch.float32, torch.bfloat16)
# The most rows a step screens in each screen's type (None: any). A float16 screen's step against
# the whole float32 product's, in turns in one process (`python -m benchmarks step`, the default
# model on a 2-core AVX2 AMD EPYC): 0.91x at one row, 0.93x at two, 1.01x at four, 1.07x at
# sixteen (BENCHMARKS.md, "A float16 screen for CPUs without bfloat16").
# An int8 screen's steps against the whole product's, in turns (an Intel Xeon with AMX; one to
# sixteen rows): 0.95x-0.98x for a bfloat16 model, 0.89x-0.97x for a float32 one.
SCREENED_ROWS = {torch.float16: 2, torch.int8: None}


def why_not(fused, own_attention: bool) -> str | None:
    """Why the native step cannot run this model here, or None when it can."""
    if fused is None:
        return "the model is not a plain Llama"
    if fused.layout is not MatrixLayout.DOT:
        return f"its matrices are {fused.layout.value}, not our own kernel's"
    if not own_attention:
        return "our attention kernel does not run here"
    if fused.tables is None:
        return "its rotary embedding depends on the sequence's length"
    if fused.norm.dtype not in DTYPES:
        return f"{fused.norm.dtype} is not float32 or bfloat16"
    return None


class NativeStep:
    """Runs a decode step through kernels/decode_step.cpp's `DecodeModel`."""

    def __init__(self, fused):
        cos, sin = fused.tables
        tensors = [fused.embedding, fused.norm, tensor_of(fused.lm_head), cos, sin]
        for layer in fused.layers:
            tensors += [layer.attention_norm, tensor_of(layer.qkv), tensor_of(layer.output), layer.mlp_norm,
                        tensor_of(layer.gate_up), tensor_of(layer.down)]
        # The model holds the tensors themselves (no copies): the weights exist once.
        self.model = torch.classes.chatapp.DecodeModel(tensors, fused.heads, fused.kv_heads, fused.eps,
                                                       fused.scaling)
        self.head = tensor_of(fused.lm_head)
        self.screens: torch.dtype | None = None  # the screen's type, where there is one
        any(self.screen_in(dtype) for dtype in own_kernels.screens())  # the first this model can use
        self.num_steps = 0
        self.captured = None  # one call a step already: nothing to capture (captured_steps.py)

    def screen_in(self, dtype: torch.dtype) -> bool:
        """Gives the model its output matrix's screen in `dtype` where it can use one: int8
        levels of a finite matrix (either dtype), or a float32 matrix in float16 where float16
        holds its values (it overflows past 65,504) and its rows' norms are finite. Whether it
        did; a screen given before stays where not."""
        if dtype not in own_kernels.screens():
            return False
        if dtype == torch.int8:
            return self._screen_in_levels()
        if self.head.dtype != torch.float32:
            return False
        # Rounded up a little: the screen's bound must not be smaller than the norm.
        norms = self.head.double().norm(dim=1).mul_(1 + 1e-6).float()
        narrow = self.head.to(dtype).contiguous()
        if not (norms.isfinite().all() and narrow.isfinite().all()):
            return False
        self.model.screen_with(narrow, norms)
        self.screens = dtype
        return True

    def _screen_in_levels(self) -> bool:
        """An 8-bit screen: each row's scale its largest magnitude over 127, its levels the row
        over the scale, rounded (a row of zeros: scale 1, levels 0)."""
        if not self.head.isfinite().all():
            return False
        # In float32: any levels and scales make a sound screen (the C++ bounds what they are).
        scales = self.head.float().abs().amax(dim=1) / 127
        scales[scales == 0] = 1
        levels = (self.head.float() / scales.unsqueeze(1)).round_().clamp_(-127, 127).to(torch.int8)
        self.model.screen_levels(levels, scales)
        self.screens = torch.int8
        return True

    def screened(self, rows: int) -> bool:
        """Whether a greedy step of this many rows reads the output matrix through the screen."""
        most = SCREENED_ROWS.get(self.screens)
        return self.screens is not None and (most is None or rows <= most)

    def takes(self, step: StepLayout, num_sampled: int) -> list[GroupDecode] | None:
        """The step's decodes when it can run it: no prompt, every token sampled."""
        if step.prompts or not step.decodes or num_sampled != step.num_tokens or step.rows is None:
            return None
        return step.decodes

    def run(self, token_ids: torch.Tensor, step: StepLayout, greedy_only: bool = False) -> StepLogits:
        """The step's logits [tokens, vocab] and greedy tokens, each layer's keys and values
        written into the cache. `greedy_only`: the caller wants the greedy tokens alone, and the
        logits may be left out (None)."""
        rows = step.rows
        screened = greedy_only and self.screened(len(token_ids))
        logits, greedy = self.model.step(token_ids, rows.positions, rows.table, screened)
        self.num_steps += 1
        return StepLogits(logits if logits.shape[1] else None, greedy)
