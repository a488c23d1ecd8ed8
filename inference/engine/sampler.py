"""Picks each sequence's next token from its logits: greedy, or temperature + top-p, seeded.

Each sampled sequence draws from its own generator, so a seeded request gives the same answer
whatever else shares its batch.
"""

from typing import NamedTuple

import torch

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
    (16 us warm), the argmax inside the step about ten."""

    logits: torch.Tensor
    greedy: torch.Tensor | None = None

    def row(self, index: int) -> "StepLogits":
        greedy_row = None if self.greedy is None else self.greedy[index : index + 1]
        return StepLogits(self.logits[index : index + 1], greedy_row)


def sample(logits: torch.Tensor, sequences: list[Sequence],
           greedy_ids: torch.Tensor | None = None) -> list[int]:
    """logits: [len(sequences), vocab]; returns one token id per sequence. `greedy_ids`: each
    row's argmax where it is known already."""
    chosen = (greedy(logits) if greedy_ids is None else greedy_ids).tolist()
    drawing = [index for index, sequence in enumerate(sequences) if not sequence.params.greedy]
    if drawing:
        wide = logits[drawing].float().cpu()
        for row, index in enumerate(drawing):
            params = sequences[index].params
            probabilities = torch.softmax(wide[row] / params.temperature, dim=-1)
            chosen[index] = _draw(probabilities, params.top_p, sequences[index].generator)
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


def _draw(probabilities: torch.Tensor, top_p: float, generator: torch.Generator) -> int:
    if top_p >= 1.0:
        return int(torch.multinomial(probabilities, 1, generator=generator))
    top, ids = _most_likely(probabilities, top_p)
    cumulative = torch.cumsum(top, dim=0)
    # Keep every token up to and including the one that brings the mass to top_p.
    keep = int(torch.searchsorted(cumulative, torch.tensor([top_p])).item()) + 1
    nucleus = top[:keep]
    picked = torch.multinomial(nucleus / nucleus.sum(), 1, generator=generator)
    return int(ids[picked])


def _most_likely(probabilities: torch.Tensor, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The likeliest tokens in order, at least as many as the nucleus holds."""
    for shortlist in NUCLEUS_SHORTLISTS:
        if shortlist < probabilities.numel():
            top, ids = torch.topk(probabilities, shortlist)
            if float(top.sum()) >= top_p:
                return top, ids
    return torch.sort(probabilities, descending=True)
