"""Picks each sequence's next token from its logits: greedy, or temperature + top-p, seeded.

Each sampled sequence draws from its own generator, so a seeded request gives the same answer
whatever else shares its batch.
"""

import torch

from .sequence import Sequence

# Most nucleus sets fit in the top few dozen tokens: look there, then wider, before sorting
# the whole vocabulary (a full sort costs milliseconds per row).
NUCLEUS_SHORTLISTS = (64, 1024)


def sample(logits: torch.Tensor, sequences: list[Sequence]) -> list[int]:
    """logits: [len(sequences), vocab]; returns one token id per sequence."""
    logits = logits.float().cpu()
    chosen = logits.argmax(dim=-1).tolist()
    for index, sequence in enumerate(sequences):
        params = sequence.params
        if params.greedy:
            continue
        probabilities = torch.softmax(logits[index] / params.temperature, dim=-1)
        chosen[index] = _draw(probabilities, params.top_p, sequence.generator)
    return chosen


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
