"""A decode step as one call of our own C++ (native_step.py, kernels/decode_step.cpp) computes
what transformers computes for each sequence alone, writes the cache the later steps read,
hands the sampler its logits' argmax, refuses what it cannot run before writing anything, and
serves only where it runs."""

import random

import pytest
import torch

from inference.engine import SamplingParams, matrices, own_kernels
from inference.engine.decode_graph import CompileMode
from inference.engine.matrices import MatrixLayout
from inference.engine.native_step import NativeStep, why_not
from inference.engine.row_table import row_table
from inference.engine.step_trial import StepTrials
from tests.inference import models

pytestmark = pytest.mark.skipif(not matrices.can_dot(torch.ones(1, device=models.DEVICE)), reason="our own kernels cannot run here")


def native_engine(model, **changes):
    return models.engine(model, matrices=MatrixLayout.DOT, compile_mode=CompileMode.ON, **changes)


@pytest.fixture(scope="module")
def native():
    """An engine on the tiny Llama in float32 whose decode steps run natively, two rows a cache
    group, so that a step's streams lie in several groups."""
    model = models.tiny_model("llama").float()
    reference = models.copy_of(model)  # the engine releases the model's own matrices
    engine = native_engine(model, max_running=4, prefill_chunk=16, prefill_chunk_idle=16, cache_group_size=2)
    return engine, reference


def test_every_logit_of_a_native_step_over_several_cache_groups_equals_transformers_forward_alone(native):
    engine, reference = native
    step = engine.runner.graph
    assert isinstance(step, NativeStep)
    ran = step.num_steps
    rng = random.Random(6)
    # One stream alone, then four of different lengths side by side in two groups.
    for wave in ([("alone", 7)], [("a", 9), ("b", 50), ("c", 3), ("d", 30)]):
        for request_id, length in wave:
            engine.add_request(request_id, [rng.randrange(3, 49152) for _ in range(length)],
                               SamplingParams(max_tokens=8))
        fed = models.record_logits(engine)
        while engine.has_work():
            engine.step()
        models.assert_as_alone(fed, reference, 1e-4)
        assert len(fed) == 8 * len(wave)
    # Each token after a stream's first reads keys the native steps wrote.
    assert step.num_steps - ran >= 7 + 4


@pytest.mark.parametrize("streams", [1, 3])
def test_the_greedy_tokens_a_native_step_hands_the_sampler_are_its_logits_argmax(native, streams):
    engine, _ = native
    native_steps = models.steps_with_greedy_tokens(engine, streams)
    assert native_steps
    for scores in native_steps:
        assert torch.equal(scores.greedy, scores.logits.argmax(dim=-1))


def test_one_thread_and_two_compute_the_same_step(native):
    engine, _ = native
    prompt = list(range(400, 440))
    answers = []
    threads = torch.get_num_threads()
    try:
        for count in (1, max(2, threads)):
            torch.set_num_threads(count)
            engine.add_request(f"threads-{count}", prompt, SamplingParams(max_tokens=6))
            fed = models.record_logits(engine)
            while engine.has_work():
                engine.step()
            answers.append(torch.stack([row for _, row in fed]))
    finally:
        torch.set_num_threads(threads)
    torch.testing.assert_close(answers[0], answers[1], rtol=1e-5, atol=1e-5)


def test_a_step_it_cannot_run_is_refused_before_any_key_is_written(native):
    engine, _ = native
    step = engine.runner.graph
    shape = engine.kv_cache.shape
    keys = torch.zeros((shape.num_layers, 2, shape.num_kv_heads, 8, shape.head_dim))
    values = torch.zeros_like(keys)
    table = row_table([(keys, values, [1])])
    with torch.inference_mode():
        with pytest.raises(RuntimeError, match="outside its cache"):
            step.model.step(torch.tensor([5]), torch.tensor([8]), table, False)
        with pytest.raises(RuntimeError, match="outside the vocabulary"):
            step.model.step(torch.tensor([10**6]), torch.tensor([3]), table, False)
        with pytest.raises(RuntimeError, match="holds 1 layers"):
            step.model.step(torch.tensor([5]), torch.tensor([3]), row_table([(keys[:1], values[:1], [1])]), False)
        with pytest.raises(RuntimeError, match="int64"):
            step.model.step(torch.tensor([5], dtype=torch.int32), torch.tensor([3]), table, False)
    assert not keys.any() and not values.any()
    # A position within the cache writes every layer's key there, and nothing elsewhere.
    with torch.inference_mode():
        step.model.step(torch.tensor([5]), torch.tensor([3]), table, False)
    written = keys.abs().sum(dim=(2, 4))  # [layers, rows, positions]
    assert written[:, 1, 3].all() and written.count_nonzero() == shape.num_layers


def test_in_bfloat16_a_native_step_computes_what_the_fused_forward_does():
    if torch.bfloat16 not in own_kernels.dtypes():
        pytest.skip("our kernels multiply float32 only on this CPU")
    model = models.tiny_model("llama").to(torch.bfloat16)
    prompt = list(range(300, 330))
    steps = []
    fused = models.engine(models.copy_of(model), matrices=MatrixLayout.DOT)
    for engine in (native_engine(models.copy_of(model)), fused):
        engine.add_request("bf16", prompt, SamplingParams(max_tokens=2))
        fed = models.record_logits(engine)
        while engine.has_work():
            engine.step()
        steps.append(fed[1][1].float())  # the first decode step's, after the same prompt and token
    assert fused.runner.graph is None
    # Rounded to bfloat16 at other places than the fused forward's (rotary and the activation
    # once, as the compiled step does): within a few of bfloat16's steps.
    torch.testing.assert_close(steps[0], steps[1], rtol=0.02, atol=0.02)


def test_the_runner_steps_natively_only_where_asked_and_our_kernels_run():
    model = models.tiny_model("llama").float()
    runner = native_engine(models.copy_of(model)).runner
    assert isinstance(runner.graph, NativeStep) and runner.trials is None
    auto = models.engine(models.copy_of(model), matrices=MatrixLayout.DOT, compile_mode=CompileMode.AUTO).runner
    assert isinstance(auto.graph, NativeStep) and isinstance(auto.trials, StepTrials)
    assert models.engine(models.copy_of(model), matrices=MatrixLayout.DOT).runner.graph is None  # compile off
    plain = models.engine(models.copy_of(model), matrices=MatrixLayout.PLAIN).runner
    assert "not our own kernel's" in why_not(plain.fused, plain.own_attention)
    float64 = models.engine(models.tiny_model("llama")).runner
    assert why_not(float64.fused, float64.own_attention) is not None
    qwen = models.engine(models.tiny_model("qwen2")).runner
    assert why_not(qwen.fused, qwen.own_attention) == "the model is not a plain Llama"


def test_a_model_whose_output_matrix_is_not_its_embedding_runs_natively_and_answers_as_transformers():
    model = models.tiny_model("llama").float()
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach() * 0.5)
    model.config.tie_word_embeddings = False
    reference = models.copy_of(model)
    engine = native_engine(model)
    assert isinstance(engine.runner.graph, NativeStep)
    engine.add_request("untied", list(range(500, 520)), SamplingParams(max_tokens=5))
    fed = models.record_logits(engine)
    while engine.has_work():
        engine.step()
    models.assert_as_alone(fed, reference, 1e-4)
    assert engine.runner.graph.num_steps == 4


@pytest.mark.parametrize(("nan_columns", "greedy"), [((), 0), ((30000, 45000), 30000), ((45000, 10000), 10000)])
def test_the_greedy_token_is_the_first_of_equal_largest_logits_or_the_first_nan_whichever_thread_computed_it(
        nan_columns, greedy):
    # An output matrix of zeros: every logit 0, or NaN in the columns whose row is. The step's
    # threads take its chunks in no fixed order; argmax's answer must not depend on it.
    model = models.tiny_model("llama").float()
    head = torch.zeros_like(model.lm_head.weight)
    head[list(nan_columns)] = float("nan")
    model.lm_head.weight = torch.nn.Parameter(head)
    model.config.tie_word_embeddings = False
    engine = native_engine(model)
    engine.add_request("ties", list(range(500, 520)), SamplingParams(max_tokens=4))
    native_steps = [scores for scores in models.scores_until_done(engine) if scores.greedy is not None]
    assert len(native_steps) == 3
    assert all(scores.greedy.tolist() == [greedy] for scores in native_steps)
