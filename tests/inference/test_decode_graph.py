"""A decode step compiled whole (decode_graph.py) computes what transformers computes for each
sequence alone (to float32's rounding), writes the cache as the fused forward does, and steps aside where it cannot run.

The graphs are compiled once for the module on the tiny model (inductor keeps them on disk, so a
second run of the suite reuses them); compiling starts the C++ compiler, hence `process`.
"""

import pickle
import random
import threading
from collections import Counter

import pytest
import torch

from inference.engine import SamplingParams
from inference.engine import decode_graph, group_view, matrices, own_kernels
from inference.engine.decode_graph import CompileMode
from inference.engine.door import GraphState
from inference.engine.matrices import MatrixLayout
from inference.engine.model_runner import ModelRunner
from inference.engine.step_trial import StepKind, StepPath, StepTrials
from tests.inference import models

pytestmark = pytest.mark.process


@pytest.fixture(scope="module")
def compiled():
    """An engine on the tiny Llama whose decode steps of one group run compiled."""
    model = models.tiny_model("llama")
    engine = models.engine(model, max_running=4, prefill_chunk=16, prefill_chunk_idle=16,
                           cache_group_size=4, compile_mode=CompileMode.ON, native_step=False)
    return engine, models.copy_of(model)


def test_every_logit_of_a_compiled_decode_step_equals_transformers_forward_alone(compiled):
    engine, reference = compiled
    rng = random.Random(5)
    # One stream alone, then three of different lengths side by side in one group (masked rows).
    for wave in ([("a", 7)], [("b", 40), ("c", 2), ("d", 70)]):
        for request_id, length in wave:
            engine.add_request(request_id, [rng.randrange(3, 49152) for _ in range(length)],
                               SamplingParams(max_tokens=8))
        fed = models.record_logits(engine)
        while engine.has_work():
            engine.step()
        for tokens, row in fed:
            with torch.inference_mode():
                expected = reference(torch.tensor([tokens], device=row.device)).logits[0, -1]
            # The norms run in float32 (as transformers' do, even for a float64 model), and the
            # graph's fused loops round them their own way: float32's rounding, not float64's.
            torch.testing.assert_close(row, expected, rtol=0, atol=1e-6)
        assert len(fed) == 8 * len(wave)
    # The lone stream's 7 decode steps and the three streams' last ones (once every prompt is fed).
    assert engine.runner.graph.num_steps >= 7 + 3
    assert engine.runner.graph.num_fallbacks == 0


@pytest.mark.parametrize("streams", [1, 3])
def test_the_greedy_tokens_a_compiled_step_hands_the_sampler_are_its_logits_argmax(compiled, streams):
    engine, _ = compiled
    compiled_steps = models.steps_with_greedy_tokens(engine, streams)
    assert compiled_steps
    for scores in compiled_steps:
        assert torch.equal(scores.greedy, scores.logits.argmax(dim=-1))


needs_our_attention = pytest.mark.skipif(not own_kernels.attends(models.DEVICE, torch.float32, 16),
                                         reason=f"our decode attention cannot run here: {own_kernels.load()}")


@pytest.fixture(scope="module")
def compiled_with_our_attention():
    """An engine on the tiny Llama in float32, where our attention runs: its compiled steps take
    streams of any cache groups (two rows a group)."""
    model = models.tiny_model("llama").float()
    engine = models.engine(model, max_running=4, prefill_chunk=16, prefill_chunk_idle=16, cache_group_size=2,
                           compile_mode=CompileMode.ON, native_step=False)
    return engine, models.copy_of(model)


@pytest.fixture(scope="module")
def compiled_over_small_groups():
    """An engine on the tiny Llama in float64, attention as products and sums (as on a GPU), two
    rows a cache group."""
    model = models.tiny_model("llama")
    engine = models.engine(model, max_running=4, prefill_chunk=16, prefill_chunk_idle=16, cache_group_size=2,
                           compile_mode=CompileMode.ON, native_step=False)
    return engine, models.copy_of(model)


@pytest.mark.parametrize("way", [pytest.param("through the table", marks=needs_our_attention),
                                 "gathered, products and sums"])
def test_a_step_over_several_cache_groups_runs_compiled_and_answers_as_transformers(request, way):
    engine, reference = request.getfixturevalue(
        "compiled_with_our_attention" if way == "through the table" else "compiled_over_small_groups")
    graph = engine.runner.graph
    assert graph.module.own_attention == (way == "through the table")
    fallbacks = graph.num_fallbacks
    rng = random.Random(6)
    for request_id, length in [("a", 9), ("b", 50), ("c", 3), ("d", 30)]:
        engine.add_request(request_id, [rng.randrange(3, 49152) for _ in range(length)], SamplingParams(max_tokens=8))
    fed = models.record_logits(engine)
    steps_over_groups = 0
    while engine.has_work():
        ran = graph.num_steps
        groups = {sequence.slot.group for sequence in engine.scheduler.running if not sequence.is_prefilling}
        engine.step()
        steps_over_groups += graph.num_steps > ran and len(groups) > 1

    for tokens, row in fed:
        with torch.inference_mode():
            expected = reference(torch.tensor([tokens], device=row.device)).logits[0, -1]
        torch.testing.assert_close(row, expected, rtol=1e-4, atol=1e-4)
    assert len(fed) == 4 * 8 and steps_over_groups > 0 and graph.num_fallbacks == fallbacks


@pytest.mark.parametrize("streams", [1, 3])
@pytest.mark.parametrize("way", [pytest.param("through the table", marks=needs_our_attention),
                                 "gathered, products and sums"])
def test_steps_call_the_compiled_code_directly_and_get_what_torch_compile_gives(request, way, streams):
    engine, _ = request.getfixturevalue(
        "compiled_with_our_attention" if way == "through the table" else "compiled_over_small_groups")
    graph = engine.runner.graph
    assert graph.direct is not None
    for index in range(streams):  # contexts shorter than the warm-up's: other sizes than it had
        engine.add_request(f"direct-{index}", [7 + index] * (5 + 3 * index), SamplingParams(max_tokens=4))
    while engine.scheduler.num_waiting or any(sequence.is_prefilling for sequence in engine.scheduler.running):
        engine.step()

    with torch.inference_mode():  # as the runner builds a step's tensors
        layout = engine.runner._layout(engine.scheduler.schedule(), streams)  # the next step, not run
        token_ids = torch.tensor([sequence.output_token_ids[-1] for sequence in engine.scheduler.running],
                                 device=models.DEVICE)
        if way == "through the table":
            inputs, call = (layout.rows.positions, layout.rows.table), graph._call_rows
        else:
            positions = torch.cat([decode.positions for decode in layout.decodes])
            inputs, call = (positions, *group_view.gather(engine.runner.kv_cache, layout.decodes)), graph._call_gathered
        direct = graph.direct(token_ids, *inputs)
        framed = graph._guarded(call, token_ids, *inputs)
        refused = graph.direct(token_ids.int(), *inputs)
        spread = torch.cat([inputs[-1], inputs[-1]], dim=-1)[..., ::2]  # the same numbers, every other place
        strided = graph.direct(token_ids, *inputs[:-1], spread)

    assert len(direct) == len(framed) == 4
    assert all(torch.equal(ours, theirs) for ours, theirs in zip(direct, framed))
    # int32 ids, or a tensor laid out otherwise: not what was compiled, left to torch.compile's frame
    assert refused is None and strided is None
    engine.abort_all()


@needs_our_attention
def test_the_compiled_step_calls_our_kernels_by_their_c_entry_points_and_the_profiler_still_names_them(
        compiled_with_our_attention):
    engine, _ = compiled_with_our_attention
    graph = engine.runner.graph
    source = graph.direct.compiled.source_code  # the generated C++ wrapper
    assert "aoti_torch_cpu_decode_attention_rows(" in source and "aoti_torch_call_dispatcher" not in source
    engine.add_request("named", [7, 8, 9], SamplingParams(max_tokens=3))
    while engine.scheduler.num_waiting or any(sequence.is_prefilling for sequence in engine.scheduler.running):
        engine.step()
    steps = graph.num_steps

    with torch.profiler.profile() as profiler:
        engine.step()

    assert graph.num_steps == steps + 1
    calls = Counter(event.name for event in profiler.events())
    layers = len(graph.module.layers)
    assert calls["chatapp::decode_attention_rows"] == layers
    # Four products a layer and the head's, where the matrices are our kernel's.
    assert calls["chatapp::dot_rows"] == (4 * layers + 1 if graph.module.layout is MatrixLayout.DOT else 0)
    engine.abort_all()


def test_the_c_entry_points_enter_inductors_cache_key_by_the_operators_names():
    if own_kernels.load() is not None:
        pytest.skip(f"our kernels cannot run here: {own_kernels.load()}")
    assert set(own_kernels.C_SHIMS) == {"dot_rows", "decode_attention_rows"}  # as kernels/shim.h declares them
    # An operator does not pickle: inductor would compile the step again at every start.
    assert pickle.loads(pickle.dumps(own_kernels.c_shims())) == {
        f"chatapp.{name}.default": [declaration] for name, declaration in own_kernels.C_SHIMS.items()}


@pytest.mark.parametrize("way", ["one group", pytest.param("through the table", marks=needs_our_attention)])
def test_a_step_whose_shapes_were_not_compiled_writes_nothing_and_is_left_to_the_fused_forward(request, way):
    engine, _ = request.getfixturevalue("compiled" if way == "one group" else "compiled_with_our_attention")
    assert engine.runner.graph.module.own_attention == (way == "through the table")
    fallbacks = engine.runner.graph.num_fallbacks
    engine.add_request("e", [5, 6, 7, 8], SamplingParams(max_tokens=3))
    engine.step()  # the prompt: not a decode step
    sequence = engine.scheduler.running[0]
    layout = engine.runner._layout(engine.scheduler.schedule(), 1)  # the next step, not run
    decodes = engine.runner.graph.takes(layout, 1)
    assert decodes is not None
    keys, values = engine.kv_cache.tensors(decodes[0].group)
    before = keys.clone(), values.clone()

    # int32 token ids: a dtype no graph was compiled for, so torch.compile would compile again.
    logits = engine.runner.graph.run(torch.tensor([sequence.output_token_ids[-1]], dtype=torch.int32), layout)

    assert logits is None and engine.runner.graph.num_fallbacks == fallbacks + 1
    assert torch.equal(keys, before[0]) and torch.equal(values, before[1])
    engine.abort_all()


@pytest.mark.skipif(models.DEVICE.type != "cpu", reason="inductor needs a C++ compiler on a CPU alone")
def test_without_a_compiler_auto_serves_through_the_fused_forward_and_on_refuses_to_load(monkeypatch):
    monkeypatch.setattr(own_kernels.shutil, "which", lambda name: None)
    monkeypatch.delenv("CXX", raising=False)
    model = models.tiny_model("llama")
    kv_cache = models.engine(model).kv_cache

    assert ModelRunner(model, kv_cache, compile_mode=CompileMode.AUTO, native_step=False).graph is None
    with pytest.raises(RuntimeError, match=r"no C\+\+ compiler"):
        ModelRunner(models.tiny_model("llama"), kv_cache, compile_mode=CompileMode.ON, native_step=False)


def test_a_model_other_than_a_plain_llama_is_not_compiled_under_auto():
    model = models.tiny_model("qwen2")
    runner = models.engine(model, compile_mode=CompileMode.AUTO, native_step=False).runner
    assert runner.graph is None and runner.fused is None


def greedy_tokens(engine, prompt: list[int], max_tokens: int) -> list[int]:
    """The tokens of one greedy answer to `prompt`, the engine stepped until it is done."""
    engine.add_request("greedy", prompt, SamplingParams(max_tokens=max_tokens, temperature=0))
    tokens = []
    while engine.has_work():
        tokens += [output.token_id for output in engine.step()]
    return tokens


@pytest.mark.parametrize("layout", [
    MatrixLayout.PLAIN,
    pytest.param(MatrixLayout.DOT, marks=pytest.mark.skipif(not matrices.can_dot(torch.ones(1, device=models.DEVICE)),
                                                            reason="our own kernel cannot run here"))])
def test_in_float32_the_graph_reads_the_fused_forwards_own_matrices_and_answers_as_it_does(layout):
    compiled = models.engine(models.tiny_model("llama").float(), compile_mode=CompileMode.ON,
                              native_step=False, matrices=layout)
    fused = models.engine(models.tiny_model("llama").float(), matrices=layout)

    graph, forward = compiled.runner.graph.module, compiled.runner.fused
    fused_matrices = [getattr(layer, name) for layer in forward.layers for name in layer.MATRICES]
    weights = [getattr(layer, name) for layer in graph.layers for name in forward.layers[0].MATRICES]
    assert all(weight is matrices.tensor_of(matrix)  # no second copy of the weights
               for weight, matrix in zip(weights + [graph.head], fused_matrices + [forward.lm_head], strict=True))
    assert greedy_tokens(compiled, list(range(100, 140)), 12) == greedy_tokens(fused, list(range(100, 140)), 12)
    assert compiled.runner.graph.num_steps == 11 and compiled.runner.graph.num_fallbacks == 0


@pytest.mark.parametrize("own_attention", [True, False], ids=["our attention kernel", "products and sums"])
def test_the_graphs_attention_either_way_answers_as_the_fused_forward_does(monkeypatch, own_attention):
    if own_attention and not own_kernels.attends(models.DEVICE, torch.float32, 16):
        pytest.skip(f"our decode attention cannot run here: {own_kernels.load() or models.DEVICE}")
    if not own_attention:  # as on a machine without our kernels, or a head or dtype they do not take
        monkeypatch.setattr(own_kernels, "ATTENTION_DTYPES", ())

    compiled = models.engine(models.tiny_model("llama").float(), compile_mode=CompileMode.ON, native_step=False)
    fused = models.engine(models.tiny_model("llama").float())

    assert compiled.runner.graph.module.own_attention is own_attention
    assert greedy_tokens(compiled, list(range(200, 230)), 10) == greedy_tokens(fused, list(range(200, 230)), 10)
    assert compiled.runner.graph.num_steps == 9 and compiled.runner.graph.num_fallbacks == 0


def test_under_auto_the_engine_serves_while_the_graph_compiles_then_times_both_ways(monkeypatch):
    compile_may_start = threading.Event()
    warm = decode_graph.DecodeGraph.warm

    def warm_when_allowed(graph):
        compile_may_start.wait()
        return warm(graph)

    monkeypatch.setattr(decode_graph.DecodeGraph, "warm", warm_when_allowed)
    compiling = models.engine(models.tiny_model("llama").float(), compile_mode=CompileMode.AUTO, native_step=False)
    fused = models.engine(models.tiny_model("llama").float())
    runner = compiling.runner
    tokens = {engine: [] for engine in (compiling, fused)}
    for engine in (compiling, fused):
        engine.add_request("g", list(range(100, 140)), SamplingParams(max_tokens=12, temperature=0))
    for _ in range(6):  # the prompt and five decode steps, before the compile began
        tokens[compiling] += [output.token_id for output in compiling.step()]

    assert runner.graph is None and runner.graph_state is GraphState.COMPILING
    compile_may_start.set()
    runner.compiling.join()
    assert runner.graph_state is GraphState.COMPILED
    for engine in (compiling, fused):
        while engine.has_work():
            tokens[engine] += [output.token_id for output in engine.step()]

    assert tokens[compiling] == tokens[fused] and len(tokens[fused]) == 12
    # The six steps after it, all of one kind (one stream, 46-51 tokens): every other one through
    # the graph, each timed.
    trial = runner.trials.of(StepKind(rows=1, context=64))
    assert len(trial.seconds[StepPath.GRAPH]) == len(trial.seconds[StepPath.FUSED]) == 3
    assert runner.graph.num_steps == 3 and runner.trials.winners() == {}


def test_a_kind_of_step_timed_slower_compiled_goes_to_the_fused_forward_and_the_answer_goes_on_unchanged():
    compiled = models.engine(models.tiny_model("llama").float(), compile_mode=CompileMode.ON, native_step=False)
    fused = models.engine(models.tiny_model("llama").float())
    runner = compiled.runner
    runner.trials = StepTrials(samples=1)
    lone_stream = StepKind(rows=1, context=64)
    runner.trials.of(lone_stream).seconds[StepPath.FUSED].append(0.0)  # as if the fused forward took no time
    tokens = {engine: [] for engine in (compiled, fused)}
    for engine in (compiled, fused):
        engine.add_request("h", list(range(100, 140)), SamplingParams(max_tokens=8, temperature=0))
        while engine.has_work():
            tokens[engine] += [output.token_id for output in engine.step()]

    assert runner.trials.winners() == {lone_stream: StepPath.FUSED}
    assert runner.graph.num_steps == 1  # the trial's one compiled step; the rest went the other way
    assert tokens[compiled] == tokens[fused] and len(tokens[fused]) == 8


@pytest.mark.skipif(not matrices.can_dot(torch.ones(1, device=models.DEVICE)), reason="our own kernel cannot run here")
def test_two_compiled_models_in_one_process_each_run_their_own_graph():
    """Graphs are kept on the code torch.compile traced; the second model's (its matrices in
    another layout, other weights) must not run the first's."""
    def model(sign: float) -> torch.nn.Module:
        tiny = models.tiny_model("llama").float()
        with torch.no_grad():
            for weight in tiny.parameters():
                weight.mul_(sign)
        return tiny

    prompt = list(range(300, 330))
    models_and_layouts = ((1.0, MatrixLayout.PLAIN), (-1.5, MatrixLayout.DOT))

    answers = [greedy_tokens(models.engine(model(sign), compile_mode=CompileMode.ON,
                                           native_step=False, matrices=layout), prompt, 8)
               for sign, layout in models_and_layouts]

    assert answers == [greedy_tokens(models.engine(model(sign), matrices=layout), prompt, 8)
                       for sign, layout in models_and_layouts]
    assert answers[0] != answers[1]
