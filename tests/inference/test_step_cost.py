"""The engine learns what a step costs here, and sizes the prompt share of a step from it."""

from inference.engine import SamplingParams
from inference.engine.step_cost import StepCost, StepMix
from tests.inference import models


def learned(points, mix: StepMix = StepMix.PROMPT, cost: StepCost | None = None) -> StepCost:
    cost = cost or StepCost()
    for tokens, seconds in points:
        cost.observe(mix, tokens, seconds)
    return cost


def test_a_fixed_part_and_a_part_per_token_are_recovered_from_steps_of_different_sizes():
    cost = learned([(tokens, 0.040 + 0.0025 * tokens) for tokens in [1, 20, 4, 60, 16, 1, 33] * 5])

    fit = cost.fit()

    assert abs(fit.fixed[StepMix.PROMPT] - 0.040) < 1e-9 and abs(fit.per_token - 0.0025) < 1e-9
    assert fit.fixed[StepMix.DECODE] == fit.fixed[StepMix.PROMPT]  # no decode-only step seen yet
    # A step of 4 tokens costs 0.05 s; 20 more keep it within twice that.
    assert cost.tokens_within(4, stretch=2.0) == 20


def test_decode_only_steps_that_run_another_way_keep_their_own_fixed_part():
    # Decode-only steps run compiled (10 ms fixed), steps with a prompt run the fused forward (25 ms
    # fixed); a token costs 1 ms either way. Decode-only steps have sizes 16 to 24, prompt steps 40
    # to 60: one line through both would read a slope near 1.6 ms and a fixed part near zero.
    decoding = learned([(tokens, 0.010 + 0.001 * tokens) for tokens in [16, 24, 20] * 20], StepMix.DECODE)
    cost = learned([(tokens, 0.025 + 0.001 * tokens) for tokens in [40, 60, 50] * 20], cost=decoding)

    fit = cost.fit()

    assert abs(fit.per_token - 0.001) < 1e-9
    assert abs(fit.fixed[StepMix.DECODE] - 0.010) < 1e-9 and abs(fit.fixed[StepMix.PROMPT] - 0.025) < 1e-9
    # 20 decode tokens alone cost 30 ms; with a prompt beside them twice that, 60 ms, is
    # 25 ms + 1 ms x (20 + 15): 15 prompt tokens.
    assert cost.tokens_within(20, stretch=2.0) == 15
    # Where the prompt's fixed part alone passes the stretch, the tokens that make its 15 ms more
    # than a decode step's at most 1/1.1 of the stall: 0.1 x 15 ms of tokens, 1 (none before:
    # then a step fed the least the scheduler allows, each paying the 15 ms again).
    assert cost.tokens_within(20, stretch=1.1) == 1
    assert cost.tokens_within(20, stretch=1.5) == 7  # 0.5 x 15 ms


def test_steps_all_of_one_size_teach_nothing():
    assert learned([(16, 0.1)] * 50).fit() is None
    assert learned([]).tokens_within(16, stretch=2.0) is None


def test_recent_steps_outweigh_old_ones_when_the_machine_changes():
    slow = [(tokens, 0.100 + 0.005 * tokens) for tokens in [1, 40] * 50]
    fast = [(tokens, 0.010 + 0.001 * tokens) for tokens in [1, 40] * 200]

    fit = learned(slow + fast).fit()

    assert abs(fit.fixed[StepMix.PROMPT] - 0.010) < 1e-4 and abs(fit.per_token - 0.001) < 1e-5


def test_the_engine_tells_steps_of_decode_tokens_only_from_steps_with_prompt_tokens():
    engine = models.engine(models.tiny_model())
    engine.add_request("first", [5] * 8, SamplingParams(max_tokens=6))
    engine.add_request("second", [6] * 8, SamplingParams(max_tokens=6))

    while engine.has_work():
        engine.step()

    # One step feeds both prompts (nothing decodes yet, so they go whole), then both decode until
    # their sixth token.
    assert engine.step_cost.seen == {StepMix.PROMPT: 1, StepMix.DECODE: 5}


def test_a_lone_streams_steps_teach_the_costs_too():
    # One stream at a time, as most of a chat server's life goes: its prompt steps (fed whole,
    # nothing decoding) and its decode steps. Untimed, they taught nothing, and the first prompt
    # that met running streams was cut into the least allowance a step whatever the machine.
    engine = models.engine(models.tiny_model())
    for number, length in enumerate((8, 40)):
        engine.add_request(f"alone-{number}", [5] * length, SamplingParams(max_tokens=3))
        while engine.has_work():
            engine.step()

    # Each prompt fed whole in one step that samples the first token, then two decode steps.
    assert engine.step_cost.seen == {StepMix.PROMPT: 2, StepMix.DECODE: 4}


def newcomer_tokens_fed_beside(num_decoding: int, num_newcomers: int = 1,
                               fixed: dict[StepMix, float] | None = None, per_token: float = 0.001,
                               prompt_tokens: int = 400, **limits) -> int:
    """Prompt tokens `num_newcomers` newcomers get, all told, in their first step beside
    `num_decoding` decoding streams, on a machine where a step costs its kind's fixed part (50 ms
    unless told) plus `per_token` a token."""
    engine = models.engine(models.tiny_model(), prefill_chunk=512, prefill_chunk_min=8, **limits)
    for number in range(num_decoding):
        engine.add_request(f"running-{number}", [5] * 4, SamplingParams(max_tokens=50))
    while engine.scheduler.waiting or any(s.is_prefilling for s in engine.scheduler.running):
        engine.step()  # their prompts first: now they all decode
    engine.step_cost.reset()  # forget the real steps: this machine's costs are set below
    for mix, seconds in (fixed or {StepMix.PROMPT: 0.050}).items():
        for tokens in [1, 30] * 20:
            engine.step_cost.observe(mix, tokens, seconds + per_token * tokens)
    for number in range(num_newcomers):
        engine.add_request(f"newcomer-{number}", list(range(3, 3 + prompt_tokens)),
                           SamplingParams(max_tokens=2))

    chunks = engine.scheduler.schedule()

    return sum(len(c.token_ids) for c in chunks if c.sequence.request_id.startswith("newcomer"))


def test_the_scheduler_feeds_as_many_prompt_tokens_as_the_learned_costs_allow():
    fed = newcomer_tokens_fed_beside(1, prefill_stretch=2.0, prefill_stretch_streams=1)

    assert fed == 51  # (0.050 + 0.001 * 1) / 0.001: twice a one-token step


def test_a_prompt_is_not_left_a_rest_smaller_than_the_least_a_step_feeds():
    # The costs allow 51 tokens (twice a one-token step); a step feeds at least 8 tokens. A rest
    # of 4 would cost the newcomer a whole step more for its first token, and the stream beside
    # it nothing: the 4 tokens cost the same in either step, the second step's fixed part more.
    whole = newcomer_tokens_fed_beside(1, prompt_tokens=55, prefill_stretch=2.0, prefill_stretch_streams=1)
    cut = newcomer_tokens_fed_beside(1, prompt_tokens=60, prefill_stretch=2.0, prefill_stretch_streams=1)

    assert whole == 55
    assert cut == 51  # a rest of 9 is worth a step of its own


def test_with_fewer_streams_decoding_a_step_may_stretch_further_for_a_prompt():
    # Stretch 1.5 among 4 or more streams: a stall of half a step each, two steps in all.
    many = newcomer_tokens_fed_beside(4, prefill_stretch=1.5, prefill_stretch_streams=4)
    two = newcomer_tokens_fed_beside(2, prefill_stretch=1.5, prefill_stretch_streams=4)
    one = newcomer_tokens_fed_beside(1, prefill_stretch=1.5, prefill_stretch_streams=4)

    assert many == 27  # 0.5 x (0.050 + 0.004) / 0.001
    assert two == 52  # 1.0 x (0.050 + 0.002) / 0.001: the same stall summed over two streams
    assert one == 102  # 2.0 x (0.050 + 0.001) / 0.001


def test_a_crowd_of_prompts_larger_than_the_streams_stretches_the_step_for_itself():
    # Stretch 1.5 among 4 or more: beside 2 decoding streams, 3 newcomers are within the 4, so
    # they get what one would; 8 newcomers are twice 4, and the stall may be twice as long.
    few = newcomer_tokens_fed_beside(2, 3, prefill_stretch=1.5, prefill_stretch_streams=4)
    crowd = newcomer_tokens_fed_beside(2, 8, prefill_stretch=1.5, prefill_stretch_streams=4,
                                       max_running=16)

    assert few == 52  # 1.0 x (0.050 + 0.002) / 0.001, as for one newcomer
    assert crowd == 104  # 2.0 x (0.050 + 0.002) / 0.001


def test_where_any_step_with_a_prompt_costs_far_more_than_a_decode_step_a_prompt_is_not_cut_small():
    # A GPU as the lent H100's probe suggests: a replayed decode step of 16 streams 3 ms (3.27
    # measured), a step with prompt tokens (the fused forward, launch by launch) 15 ms however
    # few it feeds (assumed: 155 measured, most of it cuDNN's attention, since turned off), 20 us
    # a token (assumed). No cut keeps such a step within 1.7 decode steps, and each cut pays the
    # 12 ms again: fed 8 tokens a step (the least), a 400-token prompt cost every stream 50 steps
    # of 15 ms instead of one.
    gpu = {StepMix.DECODE: 0.003, StepMix.PROMPT: 0.015}
    fed = newcomer_tokens_fed_beside(16, fixed=gpu, per_token=0.00002, prefill_stretch=1.7,
                                     prefill_stretch_streams=16, max_running=17)

    assert fed == 400  # the whole prompt: 0.7 x 12 ms of tokens (420) may join the 12 ms paid
