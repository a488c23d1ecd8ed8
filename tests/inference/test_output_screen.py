"""A native step whose rows all want their greedy token reads its output matrix through a screen
in a narrower type (kernels/decode_step.cpp's `Screen`): a float32 model's in int8 levels or
float16, a bfloat16 model's in int8 levels. It finds the token the whole product finds, bit for
bit, ties, near-ties (and a bfloat16 model's logits that its rounding makes equal) and values
float16 holds only as subnormals included, and hands the sampler no logits; a row the screen
cannot decide gets its whole product, and a step with a sampled row every logit. Each test runs
with each screen this machine's build has (int8 and float16 on any, and a bfloat16 model's
with AVX-512 BF16), or with the float32 model's where it tests a float's rounding."""

import random

import pytest
import torch

from inference.engine import SamplingParams, own_kernels
from inference.engine.decode_graph import CompileMode
from inference.engine.matrices import MatrixLayout
from inference.engine.native_step import NativeStep
from inference.engine.row_table import row_table
from tests.inference import models

pytestmark = pytest.mark.skipif(not own_kernels.screens(), reason="our kernels do not build on this machine")

CAPACITY = 64


def _cases() -> list[tuple[torch.dtype, torch.dtype]]:
    """(the model's dtype, its screen's) for each screen this machine's build has."""
    cases = [(torch.float32, screen) for screen in own_kernels.screens()]
    if torch.bfloat16 in own_kernels.dtypes() and torch.int8 in own_kernels.screens():
        cases.append((torch.bfloat16, torch.int8))
    return cases


def _case_id(case: tuple[torch.dtype, torch.dtype]) -> str:
    return "-".join(str(dtype).removeprefix("torch.") for dtype in case)


@pytest.fixture(params=_cases(), ids=_case_id)
def case(request) -> tuple[torch.dtype, torch.dtype]:
    return request.param


@pytest.fixture(params=own_kernels.screens(), ids=str)
def screen(request) -> tuple[torch.dtype, torch.dtype]:
    """A float32 model's screens alone."""
    return torch.float32, request.param


def native_step(case: tuple[torch.dtype, torch.dtype], head: torch.Tensor | None = None,
                final_norm: torch.Tensor | float = 1.0) -> tuple[NativeStep, tuple[int, int, int]]:
    """The tiny Llama's native step in the case's dtype, screened in its screen's, its output
    matrix replaced by `head` if given, its final norm's weight scaled by `final_norm`; with its
    cache's layers, key/value heads and head size."""
    dtype, screen = case
    model = models.tiny_model("llama").float()
    if head is not None:
        model.lm_head.weight = torch.nn.Parameter(head)
        model.config.tie_word_embeddings = False
    with torch.no_grad():
        model.model.norm.weight.mul_(final_norm)
    engine = models.engine(model.to(dtype), matrices=MatrixLayout.DOT, compile_mode=CompileMode.ON)
    step = engine.runner.graph
    assert isinstance(step, NativeStep)
    step.screen_in(screen)
    shape = engine.kv_cache.shape
    return step, (shape.num_layers, shape.num_kv_heads, shape.head_dim)


def near_ties() -> torch.Tensor:
    """The tiny model's output matrix with every odd row its even neighbour's plus a little, from
    a ten-millionth to a thousandth of the row: each pair's logits differ by about as much as
    bfloat16 or float16 rounds them or far less, so the largest logit always has a rival that the
    screen may put above it, or level with it."""
    head = models.tiny_model("llama").float().lm_head.weight.detach().clone()
    generator = torch.Generator().manual_seed(3)
    pairs = head[0::2].shape[0]
    scale = 10 ** (-7 + 4 * torch.rand((pairs, 1), generator=generator))
    head[1::2] = head[0::2] * (1 + scale * torch.randn(head[0::2].shape, generator=generator))
    return head


def steps(native: tuple[NativeStep, tuple[int, int, int]], rows: int, count: int, greedy_only: bool,
          seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """`count` steps of `rows` rows at random tokens and positions over random cached keys (the
    same for the same seed): each step's (logits, greedy tokens)."""
    step, (layers, kv_heads, dim) = native
    generator = torch.Generator().manual_seed(seed)
    dtype = step.head.dtype
    keys = torch.randn((layers, rows, kv_heads, CAPACITY, dim), generator=generator).to(dtype)
    values = torch.randn(keys.shape, generator=generator).to(dtype)
    table = row_table([(keys, values, list(range(rows)))])
    rng = random.Random(seed)
    outcomes = []
    with torch.inference_mode():
        for _ in range(count):
            ids = torch.tensor([rng.randrange(3, 49152) for _ in range(rows)])
            positions = torch.tensor([rng.randrange(0, CAPACITY) for _ in range(rows)])
            outcomes.append(step.model.step(ids, positions, table, greedy_only))
    return outcomes


def screened_as_whole(native, rows: int, count: int, seed: int) -> list[torch.Tensor]:
    """Runs the same steps screened and whole; asserts that the screened ones returned no logits
    and the whole product's greedy tokens (its logits' argmax); returns the whole steps' logits."""
    screened = steps(native, rows, count, greedy_only=True, seed=seed)
    whole = steps(native, rows, count, greedy_only=False, seed=seed)
    for (no_logits, greedy), (logits, expected) in zip(screened, whole, strict=True):
        assert no_logits.shape == (rows, 0) and logits.shape == (rows, 49152)
        assert torch.equal(greedy, expected) and torch.equal(expected, logits.argmax(dim=-1))
    return [logits for logits, _ in whole]


@pytest.mark.parametrize("rows", [1, 3, 8])
def test_a_screened_step_finds_the_whole_products_greedy_tokens_among_near_ties_and_returns_no_logits(case, rows):
    native = native_step(case, near_ties())
    assert native[0].screens == case[1]
    whole = screened_as_whole(native, rows, 40, seed=rows)
    # The near-ties were met: in every step, each row's largest logit had a rival within a
    # thousandth of it (bfloat16 rounds these logits by about that much, float16 by an eighth);
    # a bfloat16 model's within one of its spacings (2^-7 of the logit at most), and tied in some.
    tops = [logits.float().topk(2).values for logits in whole]
    gaps = [((top[:, 0] - top[:, 1]) / top[:, 0].abs()).max().item() for top in tops]
    if case[0] == torch.bfloat16:
        assert max(gaps) <= 2 ** -7 and min(gaps) == 0
    else:
        assert max((top[:, 0] - top[:, 1]).max().item() for top in tops) < 1e-3


def test_an_output_matrix_of_values_float16_holds_only_as_subnormals_is_screened_to_the_same_tokens(case):
    # Near-ties a thousandth of their size: float16 keeps values below 2^-14 (6e-5), most of
    # these, to a fixed 2^-24 rather than to a share of each (about 2^-9 of a typical one here,
    # four times its unit roundoff): the bound's absolute terms count that.
    head = near_ties() * 1e-3
    assert (head.abs() < 2 ** -14).float().mean() > 0.9
    native = native_step(case, head)
    assert native[0].screens == case[1]
    screened_as_whole(native, 3, 20, seed=11)


@pytest.mark.parametrize("base, spacing", [(1.5, 2.0 ** -10), (0.0, 2.0 ** -24)], ids=["normal", "subnormal"])
def test_logits_that_float16_rounding_reorders_are_still_the_whole_products(screen, base, spacing):
    # Rows x of two values, p and q (the final norm keeps its first two elements alone); for each
    # of their signs, two columns with those signs: A = base + (1.51, 1.51) and B = base + (3.49,
    # 0.49) float16 spacings. float16 rounds A to base + (2, 2) and B to base + (3, 0): where
    # 0.52 |q| < |p| < 2 |q|, B's logit is the larger and the screen's A's. Between 1 and 2
    # (spacing 2^-10) the bound's relative terms keep B a candidate; among subnormals (base 0,
    # spacing 2^-24) its absolute ones must, the relative ones being a thousandth of the gap.
    head = torch.zeros(49152, 64)
    for column, signs in enumerate(torch.tensor([(1.0, 1.0), (1.0, -1.0), (-1.0, 1.0), (-1.0, -1.0)])):
        head[100 + column, :2] = signs * (base + torch.tensor([1.51, 1.51]) * spacing)
        head[200 + column, :2] = signs * (base + torch.tensor([3.49, 0.49]) * spacing)
    final_norm = torch.zeros(64)
    final_norm[:2] = 1
    winners = {token for logits in screened_as_whole(native_step(screen, head, final_norm), 4, 10, seed=13)
               for token in logits.argmax(dim=-1).tolist()}
    assert winners & {200, 201, 202, 203} and winners & {100, 101, 102, 103}


def test_rows_beyond_float16s_range_are_screened_to_the_same_tokens(case):
    # A final norm 10^5 times its weight: each row's values pass float16's largest, 65,504; a
    # float16 screen multiplies the float32 rows as they are, and rounds only the matrix.
    screened_as_whole(native_step(case, near_ties(), final_norm=1e5), 3, 6, seed=12)


def test_an_output_matrix_beyond_float16_gets_no_float16_screen():
    head = near_ties()
    head[45000, 0] = 1e5
    native = native_step((torch.float32, torch.float16), head)
    assert native[0].screens != torch.float16 and not native[0].screen_in(torch.float16)
    for (logits, greedy), (_, whole) in zip(steps(native, 2, 3, greedy_only=True, seed=2),
                                            steps(native, 2, 3, greedy_only=False, seed=2), strict=True):
        assert (logits.shape[1] == 0) == (native[0].screens is not None) and torch.equal(greedy, whole)


def test_equal_largest_logits_go_to_the_first_column_through_the_screen(case):
    # Three equal rows far longer than the others: wherever they point the row's way, their
    # logit is the largest, equal in all three.
    head = near_ties()
    head[[300, 100, 200]] = 50 * head.norm(dim=1).max() * torch.ones(head.shape[1]) / head.shape[1] ** 0.5
    winners = {token for logits in screened_as_whole(native_step(case, head), 3, 6, seed=7)
               for token in logits.argmax(dim=-1).tolist()}
    assert 100 in winners and not {200, 300} & winners


def test_a_row_the_screen_cannot_decide_gets_its_whole_product_and_its_neighbours_do_not(case):
    # Logits of 0 but in 2,001 columns: one alone (777), and 2,000 rows a millionth apart
    # (5000-6999; equal in bfloat16), more candidates than the screen computes wherever they are
    # the largest. A row whose largest logit is column 777's is decided by the screen; the others
    # only by the whole product (the 2,000's largest, or 47,151 zeros).
    generator = torch.Generator().manual_seed(4)
    head = torch.zeros(49152, 64)
    head[777] = torch.randn(64, generator=generator)
    head[5000:7000] = torch.randn(64, generator=generator) + 1e-6 * torch.randn((2000, 64), generator=generator)
    winners = {token for logits in screened_as_whole(native_step(case, head), 8, 4, seed=1)
               for token in logits.argmax(dim=-1).tolist()}
    assert 777 in winners and any(5000 <= token < 7000 for token in winners)


def test_an_output_matrix_with_a_row_that_is_not_finite_gets_no_screen(case):
    head = near_ties()
    head[45000] = float("nan")
    native = native_step(case, head)
    assert native[0].screens is None
    for logits, greedy in steps(native, 1, 2, greedy_only=True, seed=2):
        assert logits.shape == (1, 49152) and greedy.tolist() == [45000]


def engine_answering(case: tuple[torch.dtype, torch.dtype]):
    """An engine of the tiny Llama in the case's dtype whose native step screens in its screen's,
    and a function that answers requests through it: request id -> its tokens, with each decode
    step's scores as the runner handed them to the sampler (`logits_wanted`: as if the sampler
    asked for every logit)."""
    dtype, screen = case
    engine = models.engine(models.tiny_model("llama").to(dtype), matrices=MatrixLayout.DOT,
                           compile_mode=CompileMode.ON, max_running=4)
    assert engine.runner.graph.screen_in(screen)
    run = engine.runner.run

    def answers(requests: dict[str, SamplingParams], logits_wanted: bool = False):
        handed = []
        engine.runner.run = lambda chunks, **options: handed.append(
            scores := run(chunks) if logits_wanted else run(chunks, **options)) or scores
        rng = random.Random(5)
        for request_id, params in requests.items():
            engine.add_request(request_id, [rng.randrange(3, 49152) for _ in range(12)], params)
        tokens: dict[str, list[int]] = {}
        while engine.has_work():
            for output in engine.step():
                tokens.setdefault(output.request_id, []).append(output.token_id)
        return tokens, [scores for scores in handed if scores.greedy is not None]

    return answers


def test_an_engine_answers_greedy_requests_without_logits_the_same_as_with_them_and_sampled_ones_with_them(case):
    answers = engine_answering(case)
    greedy = {f"greedy-{n}": SamplingParams(max_tokens=12) for n in range(2)}
    without, decode_steps = answers(greedy)
    assert decode_steps and all(scores.logits is None for scores in decode_steps)
    assert answers(greedy, logits_wanted=True)[0] == without
    _, decode_steps = answers({**greedy, "sampled": SamplingParams(max_tokens=12, temperature=0.8, seed=1)})
    assert decode_steps and all(scores.logits is not None for scores in decode_steps)


def test_a_float16_screen_leaves_steps_of_more_than_two_rows_to_the_whole_product():
    answers = engine_answering((torch.float32, torch.float16))
    greedy = {f"greedy-{n}": SamplingParams(max_tokens=4 + 4 * n) for n in range(3)}
    tokens, decode_steps = answers(greedy)
    assert {len(scores.greedy) for scores in decode_steps} == {1, 2, 3}
    assert all((scores.logits is None) == (len(scores.greedy) <= 2) for scores in decode_steps)
    assert answers(greedy, logits_wanted=True)[0] == tokens


@pytest.mark.parametrize("case", [case for case in _cases() if case[1] == torch.int8], ids=_case_id)
def test_levels_far_from_the_matrix_still_find_the_whole_products_greedy_tokens(case):
    # The 8-bit screen's bound is computed from the levels and scales it is given: random ones,
    # nothing like the matrix, leave every column a candidate or the row to its whole product,
    # and the tokens the whole product's.
    native = native_step(case, near_ties())
    generator = torch.Generator().manual_seed(8)
    levels = torch.randint(-127, 128, native[0].head.shape, generator=generator, dtype=torch.int8)
    native[0].model.screen_levels(levels, torch.rand(levels.shape[0], generator=generator))
    screened_as_whole(native, 3, 4, seed=9)


@pytest.mark.skipif(torch.bfloat16 not in own_kernels.dtypes(), reason="bfloat16 products need AVX-512 BF16")
def test_a_bfloat16_model_takes_an_8_bit_screen_and_no_float16_one():
    step, _ = native_step((torch.bfloat16, torch.float16))
    assert step.screens == torch.int8  # its own choice, the float16 screen refused
    assert not step.screen_in(torch.float16) and step.screens == torch.int8


@pytest.mark.skipif(torch.bfloat16 not in own_kernels.dtypes(), reason="bfloat16 products need AVX-512 BF16")
def test_a_bfloat16_models_logits_its_rounding_ties_go_to_the_first_column_through_the_screen():
    # An output matrix the int8 levels hold exactly (whole levels times 2^-10, a 127 in each
    # row), so that the screen's bound is its sums' rounding alone; each odd row its even
    # neighbour's but one level more at one element. Their float32 logits differ by that element
    # of x times 2^-10, often less than bfloat16 spaces them: rounded, they tie, and the greedy
    # token is the even column, whichever of the two float32 logits is the larger.
    generator = torch.Generator().manual_seed(6)
    head = torch.randint(-100, 100, (49152, 64), generator=generator).float()
    head[:, 0] = 127
    head[1::2] = head[0::2]
    head[1::2, 1] += 1
    native = native_step((torch.bfloat16, torch.int8), head * 2 ** -10)
    whole = screened_as_whole(native, 4, 12, seed=5)
    tied = [logits[row, token] == logits[row, token + 1] for logits in whole
            for row, token in enumerate(logits.argmax(dim=-1).tolist()) if token % 2 == 0]
    assert sum(tied) >= 8
