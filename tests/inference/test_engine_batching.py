"""Continuous batching changes nothing about what each request generates.

Requests join at different steps, with different prompt lengths (prompts longer than a prefill
chunk are fed over several steps beside running decodes) and different max_tokens; some are
cancelled mid-way. Each must produce exactly the greedy tokens of the same model generating
that request alone with transformers' own `generate`.
"""

import random

import pytest
import torch

from common.vocabulary import FinishReason
from inference.engine import SamplingParams
from inference.engine.sampler import StepLogits
from tests.fakes.wrapped_runner import WrappedRunner
from tests.inference import models


def run_staggered(engine, arrivals, cancels):
    """arrivals: step -> [(request_id, prompt, max_tokens)]; cancels: step -> [request_id]."""
    tokens: dict[str, list[int]] = {}
    reasons: dict[str, FinishReason] = {}
    step = 0
    while engine.has_work() or any(s >= step for s in arrivals):
        for request_id, prompt, max_tokens in arrivals.get(step, []):
            tokens[request_id] = []
            engine.add_request(request_id, prompt, SamplingParams(max_tokens=max_tokens))
        for request_id in cancels.get(step, []):
            assert engine.abort_request(request_id)
            reasons[request_id] = FinishReason.CANCELLED
        for output in engine.step():
            tokens[output.request_id].append(output.token_id)
            if output.finished:
                reasons[output.request_id] = output.finish_reason
        step += 1
    return tokens, reasons


@pytest.mark.parametrize("architecture, fused", [("llama", True), ("qwen2", False)])
def test_a_tiny_model_batched_with_staggered_arrivals_and_cancels_matches_generating_alone(
        architecture, fused):
    model = models.tiny_model(architecture)
    reference = models.copy_of(model)
    engine = models.engine(model, max_running=6, prefill_chunk=16, cache_group_size=4)
    assert (engine.runner.fused is not None) is fused
    rng = random.Random(7)
    requests = [
        (f"r{i}", [rng.randrange(3, 49152) for _ in range(length)], max_tokens)
        for i, (length, max_tokens) in enumerate(
            [(5, 30), (120, 12), (1, 25), (47, 40), (300, 9), (16, 33), (80, 20), (9, 17), (200, 28)]
        )
    ]
    arrivals = {0: requests[:2], 1: requests[2:3], 3: requests[3:5], 7: requests[5:7], 12: requests[7:]}
    # r4 is cancelled while its prompt is still being fed; r3 and r8 while decoding.
    cancels = {9: ["r3"], 11: ["r4"], 32: ["r8"]}

    tokens, reasons = run_staggered(engine, arrivals, cancels)

    for request_id, prompt, max_tokens in requests:
        alone = models.generate_alone(reference, prompt, max_tokens)
        if reasons[request_id] is FinishReason.CANCELLED:
            assert len(tokens[request_id]) < max_tokens, request_id
            assert tokens[request_id] == alone[: len(tokens[request_id])], request_id
        else:
            assert tokens[request_id] == alone, request_id
    assert tokens["r4"] == [] and len(tokens["r3"]) > 0 and len(tokens["r8"]) > 0
    assert engine.num_running == 0 and engine.num_waiting == 0
    assert models.holds_only_reusable_memory(engine)
    assert engine.kv_cache.num_reserved_tokens == 0


@pytest.mark.slow
def test_the_real_model_batched_with_staggered_arrivals_matches_generating_alone():
    model = models.real_model()
    reference = models.real_model()
    engine = models.engine(model, max_running=4, prefill_chunk=16, cache_group_size=2)
    questions = [
        ("a", "What is the capital of France?", 20),
        ("b", "Write a haiku about the sea.", 14),
        ("c", "List three colors, one per line.", 12),
        ("d", "Explain gravity to a five year old child in one short paragraph, please.", 12),
        ("e", "Name a large mammal.", 16),
    ]
    prompts = {rid: engine.encode_chat([{"role": "user", "content": text}]) for rid, text, _ in questions}
    arrivals = {0: [], 2: [], 5: [], 6: []}
    for (rid, _, max_tokens), step in zip(questions, [0, 0, 2, 5, 6]):
        arrivals[step].append((rid, prompts[rid], max_tokens))

    tokens, reasons = run_staggered(engine, arrivals, cancels={8: ["d"]})

    for rid, _, max_tokens in questions:
        alone = models.generate_alone(reference, prompts[rid], max_tokens)
        if rid == "d":
            assert tokens[rid] == alone[: len(tokens[rid])]
        else:
            assert tokens[rid] == alone, rid
            assert reasons[rid] == (FinishReason.STOP if alone[-1] == 2 else FinishReason.LENGTH)


class ForcedTokens(WrappedRunner):
    """Runs each step for real, then has every sampling row take the next token of a script."""

    def __init__(self, runner, script: list[int]):
        super().__init__(runner)
        self.script = iter(script)

    def run(self, chunks, **options):
        scores = self.runner.run(chunks, **options)
        forced = [next(self.script) for chunk in chunks if chunk.samples]
        return StepLogits(scores.logits, torch.tensor(forced))


def test_a_stop_string_that_the_last_token_completes_inside_a_character_ends_as_stop_not_length():
    """The last token allowed is " " plus the first bytes of a character (" \\xe2\\x80", the
    start of " —"): the text held back for the half character is released at the end, and the
    stop string it completes must end the answer as a stop string does, not as max_tokens."""
    tokenizer = models.tokenizer()
    (a,) = tokenizer.encode("a")
    space_and_half = 459
    assert tokenizer.decode([space_and_half]) == " \ufffd"
    engine = models.engine(models.tiny_model())
    engine.runner = ForcedTokens(engine.runner, [a, space_and_half])
    engine.add_request("r", tokenizer.encode("Hello"), SamplingParams(max_tokens=2, stop=("a ",)))

    outputs = []
    while engine.has_work():
        outputs += engine.step()

    assert "".join(output.text for output in outputs) == ""
    assert outputs[-1].finish_reason == FinishReason.STOP
