"""The runner computes, for a packed step, the logits transformers computes for each sequence alone.

A Llama runs through the fused forward, another architecture through transformers' own forward
with the runner's attention; both are held to float64 agreement.
"""

import random

import pytest
import torch

from inference.engine import SamplingParams
from inference.engine.fused_llama import FusedLlama
from inference.engine import matrices, own_kernels
from inference.engine.matrices import MatrixLayout
from tests.inference import models


@pytest.mark.parametrize("architecture, fused", [("llama", True), ("qwen2", False)])
def test_every_logit_of_packed_prompt_chunks_and_decodes_equals_transformers_forward_alone(
        architecture, fused):
    model = models.tiny_model(architecture)
    reference = models.copy_of(model)
    engine = models.engine(model, max_running=4, prefill_chunk=16, prefill_chunk_idle=16, cache_group_size=2)
    assert (engine.runner.fused is not None) is fused
    rng = random.Random(3)
    for request_id, length in [("a", 5), ("b", 40), ("c", 1), ("d", 23)]:
        engine.add_request(request_id, [rng.randrange(3, 49152) for _ in range(length)],
                           SamplingParams(max_tokens=6))
    fed = models.record_logits(engine)
    while engine.has_work():
        engine.step()

    models.assert_as_alone(fed, reference, 1e-9)
    # Prompt chunks of b and d shared steps with the others' decodes; every answer ran to the end.
    assert len(fed) == 4 * 6


@pytest.mark.skipif(not own_kernels.attends(models.DEVICE, torch.float32, 16),
                    reason=f"our decode attention cannot run here: {own_kernels.load()}")
@pytest.mark.parametrize("architecture", ["llama", "qwen2"])
def test_in_float32_decode_tokens_of_several_groups_attend_through_our_kernel_as_transformers_does(architecture):
    model = models.tiny_model(architecture).float()
    reference = models.copy_of(model)
    engine = models.engine(model, max_running=4, prefill_chunk=16, prefill_chunk_idle=16, cache_group_size=2)
    assert engine.runner.own_attention
    rng = random.Random(4)
    for request_id, length in [("a", 5), ("b", 40), ("c", 1), ("d", 23)]:
        engine.add_request(request_id, [rng.randrange(3, 49152) for _ in range(length)],
                           SamplingParams(max_tokens=6))
    fed = models.record_logits(engine)
    groups = set()
    while engine.has_work():
        engine.step()
        groups.add(sum(group is not None for group in engine.kv_cache.groups))

    for tokens, row in fed:
        with torch.inference_mode():
            expected = reference(torch.tensor([tokens], device=row.device)).logits[0, -1]
        torch.testing.assert_close(row, expected, rtol=1e-4, atol=1e-4)
    assert len(fed) == 4 * 6 and max(groups) >= 2


def test_fusing_the_projections_keeps_one_copy_of_each_weight_the_tied_embedding_included():
    model = models.tiny_model("llama")
    before = sum(parameter.numel() for parameter in model.parameters())

    fused = FusedLlama(model, MatrixLayout.PLAIN)

    attention = model.model.layers[0].self_attn
    qkv = fused.layers[0].qkv.weight
    assert attention.q_proj.weight.data_ptr() == qkv.data_ptr()
    assert attention.v_proj.weight.untyped_storage().data_ptr() == qkv.untyped_storage().data_ptr()
    mlp = model.model.layers[1].mlp
    assert mlp.up_proj.weight.untyped_storage().data_ptr() == fused.layers[1].gate_up.weight.untyped_storage().data_ptr()
    # The output matrix is stored once, transposed, and the tied embedding reads its rows from it.
    assert model.model.embed_tokens.weight.untyped_storage().data_ptr() == fused.lm_head.weight.untyped_storage().data_ptr()
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert sum(parameter.numel() for parameter in model.parameters()) == before


def _a_prompts_last_logits(layout: MatrixLayout, dtype: torch.dtype = torch.float32):
    """A tiny Llama in `dtype`, an engine on it in `layout`, the engine's logits for one prompt's
    last token and transformers' own (in float32, on the same weights)."""
    model = models.tiny_model("llama").to(dtype)
    reference = models.copy_of(model).float()
    tokens = torch.tensor([5, 17, 300, 4000, 9, 12])
    expected = reference(tokens[None]).logits[0].detach()
    engine = models.engine(model, matrices=layout, prefill_chunk_idle=64)
    fed = []
    run = engine.runner.run
    engine.runner.run = lambda chunks, **_: fed.append(scores := run(chunks)) or scores  # with logits
    engine.add_request("a", tokens.tolist(), SamplingParams(max_tokens=1))
    while engine.has_work():
        engine.step()
    return model, engine, fed[0].logits[0], expected[-1]


@pytest.mark.skipif(not matrices.can_pack(torch.ones(1, device=models.DEVICE)), reason="oneDNN's packed matrices need a CPU build with it")
def test_packed_matrices_give_the_plain_logits_and_replace_the_plain_weights():
    model, engine, logits, expected = _a_prompts_last_logits(MatrixLayout.PACKED)

    assert engine.runner.fused.layout is MatrixLayout.PACKED
    torch.testing.assert_close(logits, expected, rtol=1e-4, atol=1e-4)
    layer = model.model.layers[0]
    assert layer.self_attn.q_proj.weight.is_meta and layer.mlp.down_proj.weight.is_meta
    assert not model.model.embed_tokens.weight.is_meta  # the tied embedding still reads its rows
    with pytest.raises(ValueError, match="released by the engine that packed them"):
        models.engine(model)  # a second engine on the same model would read nothing


@pytest.mark.skipif(not matrices.can_dot(torch.ones(1, device=models.DEVICE)), reason="our own kernel cannot run here (own_kernels.py)")
def test_our_own_products_give_the_plain_logits_and_the_tied_embedding_reads_the_output_matrix():
    model, engine, logits, expected = _a_prompts_last_logits(MatrixLayout.DOT)

    fused = engine.runner.fused
    assert fused.layout is MatrixLayout.DOT
    torch.testing.assert_close(logits, expected, rtol=1e-4, atol=1e-4)
    layer = model.model.layers[0]
    assert layer.self_attn.q_proj.weight.is_meta and layer.mlp.down_proj.weight.is_meta
    # The output matrix as [out, in] is the embedding: one copy, read both ways.
    assert fused.embedding.data_ptr() == fused.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert model.lm_head.weight.is_meta


@pytest.mark.skipif(not matrices.can_dot(torch.ones(1, dtype=torch.bfloat16, device=models.DEVICE)),
                    reason="our own kernel multiplies bfloat16 only with AVX-512 BF16 (own_kernels.py)")
def test_in_bfloat16_our_own_products_give_the_float32_logits_within_bfloat16s_rounding():
    model, engine, logits, expected = _a_prompts_last_logits(MatrixLayout.DOT, torch.bfloat16)

    assert engine.runner.fused.layout is MatrixLayout.DOT and logits.dtype == torch.bfloat16
    torch.testing.assert_close(logits.float(), expected, rtol=0.05, atol=0.05)
    assert engine.runner.fused.embedding.data_ptr() == engine.runner.fused.lm_head.weight.data_ptr()


KINDS = {MatrixLayout.PLAIN: matrices.PlainMatrix, MatrixLayout.PACKED: matrices.PackedMatrix,
         MatrixLayout.DOT: matrices.DotMatrix}


@pytest.mark.skipif(not matrices.can_pack(torch.ones(1, device=models.DEVICE)), reason="oneDNN's packed matrices need a CPU build with it")
@pytest.mark.parametrize("faster", [
    MatrixLayout.PLAIN, MatrixLayout.PACKED,
    pytest.param(MatrixLayout.DOT, marks=pytest.mark.skipif(not matrices.can_dot(torch.ones(1, device=models.DEVICE)),
                                                            reason="our own kernel cannot run here"))])
def test_when_no_layout_is_named_the_one_measured_faster_is_kept(monkeypatch, faster):
    def timed_pass(built, inputs):  # this machine's speeds, as the test sets them
        return 0.001 if isinstance(built[0], KINDS[faster]) else 0.002

    monkeypatch.setattr(matrices, "_pass", timed_pass)

    chosen, built, _ = matrices.build(MatrixLayout.AUTO, [torch.randn(8, 16), torch.randn(16, 8)])

    assert chosen is faster
    assert len(built) == 2 and all(isinstance(matrix, KINDS[faster]) for matrix in built)


@pytest.mark.skipif(not (matrices.can_pack(torch.ones(1, device=models.DEVICE)) and matrices.can_dot(torch.ones(1, device=models.DEVICE))),
                    reason="needs oneDNN's packed matrices and our own kernel")
def test_a_layout_far_faster_at_one_row_is_kept_over_one_a_little_faster_at_many(monkeypatch):
    # Summed, packed's passes would be the shorter (90 against 92 ms): the pass of more rows,
    # the longer, would decide alone. Each count of rows weighs alike: our own kernel wins.
    one, many = matrices.PROBE_ROWS
    seconds = {matrices.PlainMatrix: {one: 0.040, many: 0.100}, matrices.PackedMatrix: {one: 0.030, many: 0.060},
               matrices.DotMatrix: {one: 0.022, many: 0.070}}

    def timed_pass(built, inputs):
        return seconds[type(built[0])][next(iter(inputs.values())).shape[0]]

    monkeypatch.setattr(matrices, "_pass", timed_pass)

    chosen, _, _ = matrices.build(MatrixLayout.AUTO, [torch.randn(8, 16), torch.randn(16, 8)])

    assert chosen is MatrixLayout.DOT


@pytest.mark.skipif(not (matrices.can_pack(torch.ones(1, device=models.DEVICE)) and matrices.can_dot(torch.ones(1, device=models.DEVICE))),
                    reason="needs oneDNN's packed matrices and our own kernel")
def test_a_machine_that_slows_down_while_the_layouts_are_timed_still_keeps_the_faster(monkeypatch):
    # Our own kernel reads 10% faster than oneDNN's, but the machine halves its speed two thirds
    # of the way through the timing: timed one layout after another, ours alone met the slow
    # phase (a server start chose packed so: "packed 10.2 / 11.3, dot 14.8 / 14.4 ms", and served
    # one stream's token in 16.5 ms against our kernel's 12.4).
    speeds = {matrices.PlainMatrix: 3.0, matrices.PackedMatrix: 1.0, matrices.DotMatrix: 0.9}
    passes = len(speeds) * len(matrices.PROBE_ROWS) * matrices.PROBE_ROUNDS
    timed = []

    def timed_pass(built, inputs):
        timed.append(built)
        slowdown = 1.0 if len(timed) <= 2 * passes // 3 else 2.0
        return speeds[type(built[0])] * slowdown / 1000

    monkeypatch.setattr(matrices, "_pass", timed_pass)

    chosen, _, _ = matrices.build(MatrixLayout.AUTO, [torch.randn(8, 16), torch.randn(16, 8)])

    assert chosen is MatrixLayout.DOT
    assert len(timed) == passes


@pytest.mark.skipif(not matrices.can_dot(torch.ones(1, device=models.DEVICE)), reason="needs our own kernel")
def test_products_of_more_rows_than_ours_was_measured_faster_at_go_to_torchs(monkeypatch, dot_row_limit):
    # As on an Intel Xeon at float32: ours the faster up to 32 rows, torch's from 64.
    passes = []

    def timed_pass(built, inputs):
        rows = next(iter(inputs.values())).shape[0]
        passes.append(rows)
        is_ours = isinstance(built[0], matrices.DotMatrix)
        return rows * (1.0 if is_ours else 1.2 if rows < 64 else 0.8) / 1000

    monkeypatch.setattr(matrices, "_pass", timed_pass)
    monkeypatch.setattr(matrices, "_measured_limits", {})  # nothing measured yet in this process
    built = matrices.dot_matrices([torch.randn(24, 40), torch.randn(40, 24)])
    limit = matrices.choose_dot_row_limit(built)
    again = matrices.choose_dot_row_limit(matrices.dot_matrices([torch.randn(24, 40), torch.randn(40, 24)]))
    set_then = dot_row_limit(torch.float32)

    assert limit == again == set_then == 32
    # Counts past the first that torch won are not timed, nor is a model's second load.
    assert sorted(set(passes)) == [8, 16, 32, 64]
    assert len(passes) == 4 * 2 * matrices.LIMIT_ROUNDS


@pytest.mark.skipif(not matrices.can_dot(torch.ones(1, device=models.DEVICE)), reason="needs our own kernel")
def test_past_whole_model_rows_the_limit_is_timed_on_a_share_of_the_matrices_with_as_much_arithmetic(
        monkeypatch, dot_row_limit):
    # As on an AMD EPYC at float32: ours the faster at every count, all of them timed.
    shares = {}

    def timed_pass(built, inputs):
        rows = next(iter(inputs.values())).shape[0]
        shares.setdefault(rows, set()).add(len(built))
        return rows * len(built) * (1.0 if isinstance(built[0], matrices.DotMatrix) else 1.2) / 1e6

    monkeypatch.setattr(matrices, "_pass", timed_pass)
    monkeypatch.setattr(matrices, "_measured_limits", {})
    limit = matrices.choose_dot_row_limit(matrices.dot_matrices([torch.randn(24, 40), torch.randn(40, 24)] * 8))

    whole = matrices.LIMIT_WHOLE_ROWS
    assert limit == matrices.LIMIT_ROWS[-1]
    assert {rows: share for rows, share in shares.items() if rows <= whole} == {
        rows: {16} for rows in matrices.LIMIT_ROWS if rows <= whole}
    assert {rows: share for rows, share in shares.items() if rows > whole} == {
        rows: {16 * whole // rows} for rows in matrices.LIMIT_ROWS if rows > whole}


@pytest.mark.skipif(not matrices.can_pack(torch.ones(1, device=models.DEVICE)), reason="oneDNN's packed matrices need a CPU build with it")
def test_a_step_padded_to_the_rows_packed_matrices_read_fastest_gives_the_plain_logits(monkeypatch):
    def timed_pass(built, inputs):  # packed wins, and reads four rows faster than one
        if not isinstance(built[0], matrices.PackedMatrix):
            return 0.002
        return {1: 0.0013, 2: 0.0012, 4: 0.0011}[built[0].min_rows]

    monkeypatch.setattr(matrices, "_pass", timed_pass)
    model = models.tiny_model("llama").float()
    reference = models.copy_of(model)
    engine = models.engine(model, matrices=MatrixLayout.AUTO, prefill_chunk=3, prefill_chunk_idle=3)
    fed = []
    run = engine.runner.run
    engine.runner.run = lambda chunks, **_: fed.append(scores := run(chunks)) or scores  # with logits
    tokens = [5, 17, 300, 4000, 9]  # chunks of 3 and 2 rows, then decodes of 1
    engine.add_request("a", tokens, SamplingParams(max_tokens=4))
    outputs = [output for _ in range(8) for output in engine.step()]

    assert engine.runner.fused.min_rows == 4
    sequence = tokens + [output.token_id for output in outputs]
    with torch.inference_mode():
        expected = reference(torch.tensor([sequence])).logits[0, len(tokens) - 1 : -1]
    torch.testing.assert_close(torch.cat([scores.logits for scores in fed]), expected, rtol=1e-4, atol=1e-4)


def test_a_bfloat16_model_loads_and_answers_on_any_cpu_with_the_layout_its_onednn_can_pack():
    # On an AVX2-only AMD EPYC, oneDNN could not pack a bfloat16 matrix ("bf16 path needs the
    # cpu support avx_ne_convert or avx512bw, avx512vl and avx512dq") and a service asked for
    # INFERENCE_DTYPE=bfloat16 failed to load.
    model = models.tiny_model("llama").to(torch.bfloat16)
    engine = models.engine(model, matrices=MatrixLayout.AUTO)
    engine.add_request("a", [5, 17, 300, 4000], SamplingParams(max_tokens=3))
    outputs = []
    while engine.has_work():
        outputs += engine.step()

    assert outputs and outputs[-1].finished
    if not matrices.can_pack(torch.ones(1, dtype=torch.bfloat16)):
        assert engine.runner.fused.layout is MatrixLayout.PLAIN


def test_a_step_of_more_than_eight_rows_is_padded_by_less_than_an_eighth_to_one_of_eight_counts_per_doubling():
    counts = {count: matrices.packed_rows(count) for count in range(1, 4097)}

    assert all(counts[count] == count for count in range(1, 9))
    assert all(count <= rows < count * 9 / 8 for count, rows in counts.items())
    for low in (8, 64, 2048):
        assert len({counts[count] for count in range(low + 1, 2 * low + 1)}) == 8


@pytest.mark.slow
@pytest.mark.skipif(not matrices.can_pack(torch.ones(1, device=models.DEVICE)), reason="oneDNN's packed matrices need a CPU build with it")
def test_steps_of_every_size_give_packed_matrices_few_different_counts_of_rows():
    # oneDNN keeps a kernel, with its memory, for every count of rows a packed matrix is given:
    # serving 64 streams (prompt chunks of every size beside the decodes) grew the heap in use by
    # 270 MB that stayed (BENCHMARKS.md). Here: prompts of 1 to 160 tokens, each fed in one step,
    # then one step that samples 160 sequences at once.
    model = models.tiny_model("llama").float()
    reference = models.copy_of(model)
    engine = models.engine(model, matrices=MatrixLayout.PACKED, reuse_prefixes=False, max_running=160,
                           prefill_chunk=160, prefill_chunk_idle=160, max_cached_tokens=160 * 192)
    rng = random.Random(7)
    prompts = {f"alone-{length}": [rng.randrange(3, 49152) for _ in range(length)] for length in range(1, 161)}
    together = {f"together-{index}": [rng.randrange(3, 49152)] for index in range(160)}
    fed = models.record_logits(engine)
    with torch.profiler.profile(record_shapes=True) as profile:
        for group in [{name: tokens} for name, tokens in prompts.items()] + [together]:
            for name, tokens in group.items():
                engine.add_request(name, tokens, SamplingParams(max_tokens=1))
            while engine.has_work():
                engine.step()

    rows = {event.input_shapes[0][0] for event in profile.events() if event.name == "mkldnn::_linear_pointwise"}
    assert 0 < len(rows) <= 8 + 8 * 5  # at most 8 counts in each doubling from 8 to 256
    assert len(fed) == len(prompts) + len(together)
    for tokens, row in fed[::23]:  # prompts alone of 1, 24, ... 139 tokens, and 7 sampled together
        with torch.inference_mode():
            expected = reference(torch.tensor([tokens])).logits[0, -1]
        torch.testing.assert_close(row, expected, rtol=1e-4, atol=1e-4)
