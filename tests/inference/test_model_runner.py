"""The runner computes, for a packed step, the logits transformers computes for each sequence alone.

A Llama runs through the fused forward, another architecture through transformers' own forward
with the runner's attention; both are held to float64 agreement.
"""

import random

import pytest
import torch

from inference.engine import SamplingParams
from inference.engine.fused_llama import FusedLlama
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
    fed: list[tuple[list[int], torch.Tensor]] = []  # (the sequence so far, its logits)
    run = engine.runner.run

    def run_and_record(chunks):
        logits = run(chunks)
        sampling = [chunk for chunk in chunks if chunk.samples]
        for chunk, row in zip(sampling, logits, strict=True):
            sequence = chunk.sequence
            fed.append(((sequence.prompt_token_ids + sequence.output_token_ids)[: chunk.end], row))
        return logits

    engine.runner.run = run_and_record
    while engine.has_work():
        engine.step()

    for tokens, row in fed:
        with torch.inference_mode():
            expected = reference(torch.tensor([tokens], device=row.device)).logits[0, -1]
        torch.testing.assert_close(row, expected, rtol=1e-9, atol=1e-9)
    # Prompt chunks of b and d shared steps with the others' decodes; every answer ran to the end.
    assert len(fed) == 4 * 6


def test_fusing_the_projections_keeps_one_copy_of_each_weight_the_tied_embedding_included():
    model = models.tiny_model("llama")
    before = sum(parameter.numel() for parameter in model.parameters())

    fused = FusedLlama(model)

    attention = model.model.layers[0].self_attn
    assert attention.q_proj.weight.data_ptr() == fused.layers[0].qkv.data_ptr()
    assert attention.v_proj.weight.untyped_storage().data_ptr() == fused.layers[0].qkv.untyped_storage().data_ptr()
    mlp = model.model.layers[1].mlp
    assert mlp.up_proj.weight.untyped_storage().data_ptr() == fused.layers[1].gate_up.untyped_storage().data_ptr()
    # The output matrix is stored once, transposed, and the tied embedding reads its rows from it.
    assert model.model.embed_tokens.weight.untyped_storage().data_ptr() == fused.lm_head.untyped_storage().data_ptr()
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert sum(parameter.numel() for parameter in model.parameters()) == before
