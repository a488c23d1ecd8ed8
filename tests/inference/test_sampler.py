"""Sampling: greedy picks the top token; a seed makes a request repeatable; top-p trims the tail."""

import pytest
import torch

from inference.engine import own_kernels, sampler
from inference.engine.detokenizer import IncrementalDetokenizer
from inference.engine.sampler import ARGMAX_BLOCK, greedy, sample
from inference.engine.sequence import SamplingParams, Sequence


# Loaded (built the first time) as the module is collected, as the kernels' own tests do.
WHY_NOT_OURS = own_kernels.load()


@pytest.fixture(params=["torch", "ours"])
def drawing(request, monkeypatch):
    """Each draw test twice: torch's operations (a GPU's way) and our kernel (a CPU's)."""
    if request.param == "torch":
        monkeypatch.setattr(own_kernels, "draws", lambda logits: False)
    elif WHY_NOT_OURS is not None:
        pytest.skip(f"our kernels do not run here: {WHY_NOT_OURS}")
    return request.param


def sequence(**params) -> Sequence:
    params.setdefault("max_tokens", 8)
    return Sequence("r", [1], SamplingParams(**params), IncrementalDetokenizer(lambda ids: ""))


def test_greedy_takes_the_most_likely_token():
    logits = torch.tensor([[0.1, 3.0, 0.2], [5.0, 0.0, 0.0]])

    assert sample(logits, [sequence(), sequence()]) == [1, 0]


def test_the_same_seed_draws_the_same_tokens_whatever_shares_the_batch(drawing):
    torch.manual_seed(1)
    logits = torch.randn(3, 1000)
    alone = [sample(logits[:1], [s])[0] for s in [sequence(temperature=1.0, seed=42)] for _ in range(5)]
    seeded = sequence(temperature=1.0, seed=42)
    neighbours = [sequence(temperature=1.0), sequence(temperature=0.5, top_p=0.5)]

    batched = [sample(logits, [seeded, *neighbours])[0] for _ in range(5)]

    assert batched == alone
    assert len(set(batched)) > 1  # it did sample, not argmax


def test_top_p_never_draws_outside_the_nucleus(drawing):
    # Probabilities 0.5, 0.3, 0.1, 0.1: top_p 0.75 keeps only the first two.
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.1, 0.1]]))
    draws = {sample(logits, [sequence(temperature=1.0, top_p=0.75, seed=s)])[0] for s in range(200)}

    assert draws == {0, 1}


def test_a_flat_distribution_still_honours_top_p_beyond_the_shortlist(drawing):
    logits = torch.zeros(1, 1000)
    draws = {sample(logits, [sequence(temperature=1.0, top_p=0.9, seed=s)])[0] for s in range(300)}

    assert len(draws) > 100


def test_greedy_picks_the_first_of_equal_maxima_anywhere_in_a_large_vocabulary():
    torch.manual_seed(2)
    logits = torch.randn(5, 4 * ARGMAX_BLOCK)
    logits[1, [7, 3 * ARGMAX_BLOCK + 5]] = 50.0  # a tie across blocks: the first wins
    logits[2, [ARGMAX_BLOCK + 3, ARGMAX_BLOCK + 9]] = 50.0  # a tie inside a block
    logits[3, -1] = 50.0  # the very last token
    logits[4, [9, 2 * ARGMAX_BLOCK]] = float("nan")  # NaN counts as the maximum, as in argmax

    assert greedy(logits).tolist() == logits.argmax(dim=-1).tolist()
    assert greedy(logits).tolist()[1:4] == [7, ARGMAX_BLOCK + 3, 4 * ARGMAX_BLOCK - 1]


def test_draws_follow_the_tempered_probabilities(drawing):
    # Probabilities 0.5, 0.3, 0.15, 0.05 at temperature 1; at temperature 0.5 they are squared.
    probabilities = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = torch.log(probabilities).expand(4000, 4)
    for temperature, expected in ((1.0, probabilities), (0.5, probabilities**2 / (probabilities**2).sum())):
        seeded = [sequence(temperature=temperature, seed=s) for s in range(4000)]

        counts = torch.bincount(torch.tensor(sample(logits, seeded)), minlength=4)

        # 4000 draws: each share within 4 standard deviations (at most 0.032) of its probability.
        assert torch.allclose(counts / 4000, expected, atol=0.032), (temperature, counts)


def test_a_token_without_probability_is_never_drawn_even_at_the_vocabulary_ends(drawing):
    logits = torch.full((1, 1000), float("-inf"))
    logits[0, 1:3] = 0.0  # two equal tokens; the first and the last have none
    for top_p in (1.0, 0.99, 0.5):
        draws = {sample(logits, [sequence(temperature=1.0, top_p=top_p, seed=s)])[0] for s in range(300)}

        assert draws <= {1, 2} and (top_p == 0.5 or draws == {1, 2}), (top_p, draws)


def test_a_row_draws_the_same_beside_rows_that_need_a_wider_shortlist_or_none(drawing):
    torch.manual_seed(3)
    peaked = torch.randn(1, 5000) * 8  # its nucleus fits the first shortlist
    flat = torch.zeros(1, 5000)  # its nucleus needs every token
    seeded = dict(temperature=2.0, top_p=0.9, seed=7)
    lone = sequence(**seeded)
    alone = [sample(peaked, [lone])[0] for _ in range(5)]

    batch = torch.cat([flat, peaked, flat])
    batched = sequence(**seeded)
    beside = [sample(batch, [sequence(temperature=1.0, top_p=0.95), batched, sequence(temperature=1.0)])[1]
              for _ in range(5)]

    assert beside == alone
    assert len(set(alone)) > 1  # it did draw from several tokens


def test_a_draw_from_probabilities_that_are_not_numbers_fails_and_says_so(drawing):
    logits = torch.zeros(2, 100)
    logits[1, 5] = float("nan")

    with pytest.raises(ValueError, match="probabilit"):
        sample(logits, [sequence(temperature=1.0), sequence(temperature=1.0)])


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_our_kernel_draws_what_torchs_operations_draw_from_a_models_vocabulary(dtype):
    if WHY_NOT_OURS is not None:
        pytest.skip(f"our kernels do not run here: {WHY_NOT_OURS}")
    torch.manual_seed(4)
    # A chat model's row: a few likely tokens over a long tail.
    logits = (torch.randn(1, 49152) * 1.5).to(dtype)
    logits[0, :40] += 8
    for temperature, top_p in ((0.7, 0.9), (1.0, 1.0), (1.3, 0.5), (0.5, 0.99)):
        seeds = range(300)
        temperatures = torch.tensor([temperature])
        nucleus = torch.tensor([top_p], dtype=torch.float64)
        points = [torch.rand(1, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
                  for seed in seeds]

        ours = [torch.ops.chatapp.draw_tokens(logits, temperatures, nucleus, point).item() for point in points]
        torchs = [sampler._draw_with_torch(logits, temperatures, nucleus, point)[0] for point in points]

        # The same token; or one of equal logit (bfloat16's logits tie often, and torch's top-k
        # orders equal values its own way); or, where rounding moved the point across a boundary
        # (the two sum a vocabulary's weights in different orders: a few draws in 300 from this
        # long tail), the next candidate: no probability between the two.
        cumulative, probabilities = _walked(logits[0], temperature, top_p)
        moved = 0
        for mine, theirs in zip(ours, torchs, strict=True):
            if mine == theirs or logits[0, mine] == logits[0, theirs]:
                continue
            first, later = sorted((mine, theirs), key=lambda token: cumulative[token])
            between = cumulative[later] - probabilities[later] - cumulative[first]
            assert abs(between) < 1e-9, (temperature, top_p, mine, theirs)
            moved += 1
        assert moved <= 3, (temperature, top_p)
        assert len(set(ours)) > 3, (temperature, top_p)  # it did draw from several tokens


def _walked(row: torch.Tensor, temperature: float, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Each token's probability, and its cumulative probability up to and including it in the
    order a draw walks the candidates: the vocabulary's (top_p 1), else the likeliest first."""
    probabilities = torch.softmax(row.double() / temperature, dim=-1)
    order = torch.arange(len(row)) if top_p >= 1.0 else torch.argsort(probabilities, descending=True, stable=True)
    cumulative = torch.empty_like(probabilities)
    cumulative[order] = probabilities[order].cumsum(0)
    return cumulative, probabilities


def test_a_temperature_too_small_to_divide_by_picks_the_likeliest_token(drawing):
    # 20 / 1e-40 overflows float32: such a temperature is the greedy answer, not a failed request.
    logits = torch.tensor([[0.5, 20.0, 3.0], [1.0, -2.0, 7.5]])

    assert sample(logits, [sequence(temperature=1e-40), sequence(temperature=1e-6, top_p=0.5)]) == [1, 2]
