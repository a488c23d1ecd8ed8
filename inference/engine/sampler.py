"""Picks each sequence's next token from its logits: greedy, or temperature + top-p, seeded.

Each sampled sequence draws from its own generator, so a seeded request makes the same draws
whatever else shares its batch (the logits it draws from may still differ in their last bits
with the batch's shape or a reused prompt prefix: enough, at bfloat16, to change a token).
"""

from typing import NamedTuple

import torch

from . import own_kernels
from .sequence import Sequence

# Most nucleus sets fit in the top few dozen tokens: look there, then wider, before sorting
# the whole vocabulary (a full sort costs milliseconds per row).
NUCLEUS_SHORTLISTS = (64, 1024)


# torch's argmax reduces a row with scalar code; maxima of blocks this long vectorise.
ARGMAX_BLOCK = 1024


class StepLogits(NamedTuple):
    """A step's logits [sampling sequences, vocab] and, where the compiled step found them beside
    (decode_graph.py), each row's greedy token: after the step has streamed the weights through
    the caches, the few operations of `greedy` took 200-300 us of a one-stream step on a CPU
    (16 us warm), the argmax inside the step about ten. The logits are None where the step was
    asked for greedy tokens only and found them without (native_step.py)."""

    logits: torch.Tensor | None
    greedy: torch.Tensor | None = None

    def row(self, index: int) -> "StepLogits":
        greedy_row = None if self.greedy is None else self.greedy[index : index + 1]
        logits_row = None if self.logits is None else self.logits[index : index + 1]
        return StepLogits(logits_row, greedy_row)


def sample(logits: torch.Tensor, sequences: list[Sequence],
           greedy_ids: torch.Tensor | None = None) -> list[int]:
    """logits: [len(sequences), vocab]; returns one token id per sequence. `greedy_ids`: each
    row's argmax where it is known already."""
    drawing = [index for index, sequence in enumerate(sequences) if not sequence.params.greedy]
    if greedy_ids is not None:
        chosen = greedy_ids.tolist()
    elif len(drawing) < len(sequences):
        chosen = greedy(logits).tolist()
    else:
        chosen = [0] * len(sequences)  # every row draws
    if drawing:
        drawn = draw(_rows(logits, drawing), [sequences[index] for index in drawing])
        for index, token_id in zip(drawing, drawn, strict=True):
            chosen[index] = token_id
    return chosen


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """Each row's argmax, the first of equal maxima as in transformers' greedy search.

    The block holding a row's maximum is the first whose own maximum equals it (NaN counts as the
    maximum, as in argmax); only that block is then searched.
    """
    rows, vocab = logits.shape
    if vocab % ARGMAX_BLOCK:
        return logits.argmax(dim=-1)
    blocks = logits.view(rows, vocab // ARGMAX_BLOCK, ARGMAX_BLOCK)
    best = blocks.amax(dim=-1).argmax(dim=-1)
    within = blocks[torch.arange(rows, device=logits.device), best].argmax(dim=-1)
    return best * ARGMAX_BLOCK + within


def draw(logits: torch.Tensor, sequences: list[Sequence]) -> list[int]:
    """One token per row, drawn from softmax(row / temperature) within the row's top_p nucleus.

    Each sequence's generator gives one uniform number, which picks the token where it falls on
    the candidates' cumulative probabilities. torch.multinomial draws one exponential number per
    token of the vocabulary instead: 0.5-0.8 ms a row for 49,152 tokens on a 2-core AMD EPYC,
    a tenth of a one-stream step. Every operation on a row's numbers is the same whatever rows
    share the batch, so a seeded request draws the same tokens alone or beside others.

    On a CPU our own kernel draws (own_kernels.draws: kernels/token_draw.cpp, the same draw in
    one call), elsewhere torch's operations (`_draw_with_torch`).
    """
    device = logits.device
    temperatures = torch.tensor([sequence.params.temperature for sequence in sequences], device=device)
    top_p = torch.tensor([sequence.params.top_p for sequence in sequences], dtype=torch.float64, device=device)
    points = torch.tensor([float(torch.rand((), generator=sequence.generator, dtype=torch.float64))
                           for sequence in sequences], dtype=torch.float64, device=device)
    if own_kernels.draws(logits):
        return torch.ops.chatapp.draw_tokens(logits, temperatures, top_p, points).tolist()
    return _draw_with_torch(logits, temperatures, top_p, points)


def _draw_with_torch(logits: torch.Tensor, temperatures: torch.Tensor, top_p: torch.Tensor,
                     points: torch.Tensor) -> list[int]:
    """`draw` in torch's operations: temperatures, top_p and points [rows]."""
    probabilities = torch.softmax(logits.float() / temperatures[:, None], dim=-1)
    points = points[:, None]
    chosen = [0] * len(logits)
    whole = (top_p >= 1.0).nonzero().squeeze(1).tolist()
    if whole:
        cumulative = torch.cumsum(_rows(probabilities, whole), dim=-1, dtype=torch.float64)
        for row, token_id in zip(whole, _pick(cumulative, _rows(points, whole)).tolist(), strict=True):
            chosen[row] = token_id
    nucleus = (top_p < 1.0).nonzero().squeeze(1).tolist()
    if nucleus:
        drawn = _draw_nucleus(_rows(probabilities, nucleus), _rows(points, nucleus), top_p[nucleus, None])
        for row, token_id in zip(nucleus, drawn, strict=True):
            chosen[row] = token_id
    return chosen


def _draw_nucleus(probabilities: torch.Tensor, points: torch.Tensor, top_p: torch.Tensor) -> list[int]:
    """Each row's draw among its likeliest tokens, every one up to and including the one that
    brings their mass to the row's top_p, found in the row's shortest shortlist that holds them."""
    chosen = [0] * len(probabilities)
    rows = list(range(len(probabilities)))
    for shortlist in (*NUCLEUS_SHORTLISTS, None):
        if not rows:
            break
        if shortlist is None or shortlist >= probabilities.shape[-1]:
            top, ids = torch.sort(_rows(probabilities, rows), dim=-1, descending=True)
            fits = [True] * len(rows)
        else:
            top, ids = torch.topk(_rows(probabilities, rows), shortlist, dim=-1)
            # How wide a row looks depends on its own numbers only, never on its neighbours'.
            fits = (top.sum(dim=-1, dtype=torch.float64) >= top_p[rows].squeeze(1)).tolist()
        taken = [index for index, fit in enumerate(fits) if fit]
        if taken:
            cumulative = torch.cumsum(top[taken], dim=-1, dtype=torch.float64)
            counts = torch.searchsorted(cumulative, top_p[[rows[index] for index in taken]]) + 1
            picked = _pick(cumulative, points[[rows[index] for index in taken]], counts)
            for index, token_id in zip(taken, ids[taken].gather(1, picked.unsqueeze(1)).squeeze(1).tolist(),
                                       strict=True):
                chosen[rows[index]] = token_id
        rows = [row for row, fit in zip(rows, fits, strict=True) if not fit]
    return chosen


def _rows(tensor: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """`tensor[rows]`, without copying a whole vocabulary's row where the rows are all of them."""
    return tensor if rows == list(range(len(tensor))) else tensor[rows]


def _pick(cumulative: torch.Tensor, points: torch.Tensor, counts: torch.Tensor | None = None) -> torch.Tensor:
    """Per row, the index of the candidate (among its first `counts`, or all) on whose share of
    the cumulative weights `points` (uniform in [0, 1), scaled to their total) falls: each
    candidate with the chance of its weight."""
    if counts is None:
        counts = torch.full_like(points, cumulative.shape[-1], dtype=torch.long)
    totals = cumulative.gather(1, counts.clamp(max=cumulative.shape[-1]) - 1)
    if not bool(((totals > 0) & torch.isfinite(totals)).all()):
        raise ValueError("a token's probability to draw from is not a finite number "
                         "(a NaN or infinite logit, or a NaN temperature)")
    picked = torch.searchsorted(cumulative, points * totals, right=True)
    # The last candidate with any weight, where rounding put a point on the total itself.
    last = torch.searchsorted(cumulative, totals)
    return torch.minimum(picked, last).squeeze(1)
