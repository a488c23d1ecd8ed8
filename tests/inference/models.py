"""Models for the inference tests: the real default model, and a tiny random one of its shape."""

import copy
import functools
import os
import random
from pathlib import Path

import torch
from transformers import (AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM)

from inference.config import InferenceConfig
from inference.engine import EngineConfig, LLMEngine, SamplingParams, loader
from inference.engine.matrices import MatrixLayout

# Where the engine's tests put their models: "cuda" when `make gpu-check` runs them on a lent GPU
# (benchmarks/gpu_check.py). Test-only, so it is read here rather than in inference/config.py.
DEVICE = torch.device(os.environ.get("CHATAPP_TEST_DEVICE", "cpu"))


@functools.cache
def default_model_dir() -> Path:
    """The default model converted from its GGUF file (once per machine, in the usual cache)."""
    return loader.converted_gguf(loader.default_model_path(), InferenceConfig().cache_dir)


@functools.cache
def tokenizer():
    return AutoTokenizer.from_pretrained(default_model_dir(), local_files_only=True)


def tiny_model(architecture: str = "llama") -> torch.nn.Module:
    """A randomly initialised two-layer model with the real tokenizer's vocabulary, in float64.

    float64 makes batched and single-sequence arithmetic agree far below any gap between two
    logits, so greedy tokens must match exactly. "llama" (the default model's architecture) runs
    through the engine's fused Llama forward; "qwen2" (biased query/key/value projections) runs
    through transformers' own forward with the engine's attention.
    """
    shape = dict(
        vocab_size=len(tokenizer()), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
        bos_token_id=1, eos_token_id=2, pad_token_id=2, tie_word_embeddings=True,
    )
    config_class, model_class = {
        "llama": (LlamaConfig, LlamaForCausalLM),
        "qwen2": (Qwen2Config, Qwen2ForCausalLM),
    }[architecture]
    torch.manual_seed(0)
    return model_class(config_class(**shape)).to(DEVICE, torch.float64).eval()


def copy_of(model: torch.nn.Module) -> torch.nn.Module:
    """The same weights in a model left on transformers' own attention (a reference)."""
    weight = next(model.parameters())
    twin = type(model)(copy.deepcopy(model.config)).to(weight.device, weight.dtype).eval()
    twin.load_state_dict(model.state_dict())
    twin.set_attn_implementation("sdpa")
    return twin


def real_model() -> torch.nn.Module:
    return AutoModelForCausalLM.from_pretrained(default_model_dir(), dtype=torch.float32,
                                                local_files_only=True).to(DEVICE).eval()


def limits(**changes) -> EngineConfig:
    """The tests' engine limits. The matrices are named plain: AUTO times both layouts on the
    model at every engine built (seconds per real model, and its pick follows the machine's load
    at that moment); test_model_runner.py holds the packed layout and AUTO's choice."""
    values = dict(max_running=8, max_cached_tokens=8192, max_model_len=2048, prefill_chunk=16,
                  prefill_chunk_idle=64, cache_group_size=4, matrices=MatrixLayout.PLAIN)
    values.update(changes)
    return EngineConfig(**values)


def engine(model: torch.nn.Module, **changes) -> LLMEngine:
    return LLMEngine(model, tokenizer(), limits(**changes))


def generate_alone(reference: torch.nn.Module, prompt: list[int], max_tokens: int) -> list[int]:
    """Greedy tokens from transformers' own generate, one request at a time."""
    with torch.inference_mode():
        output = reference.generate(torch.tensor([prompt], device=reference.device),
                                    max_new_tokens=max_tokens,
                                    do_sample=False, eos_token_id=2, pad_token_id=2)
    return output[0, len(prompt):].tolist()


def engine_tokenizer_prompt(messages: list[dict]) -> list[int]:
    """The prompt tokens the service builds for these messages."""
    return list(tokenizer().apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                return_dict=False))


def holds_only_reusable_memory(engine: LLMEngine) -> bool:
    """No running sequence holds cache memory: what is left is kept prefixes', given up on demand."""
    cache = engine.kv_cache
    return cache.num_reserved_tokens == 0 and cache.num_allocated_bytes == cache.num_reusable_bytes


def record_logits(engine) -> list[tuple[list[int], torch.Tensor]]:
    """(the sequence so far, its logits) for every token the engine's runner samples from now on."""
    fed = []
    engine.runner.__dict__.pop("run", None)  # an earlier wave's recorder
    run = engine.runner.run

    def run_and_record(chunks, **_):
        scores = run(chunks)  # the logits, whatever the engine asks for
        for chunk, row in zip([chunk for chunk in chunks if chunk.samples], scores.logits, strict=True):
            sequence = chunk.sequence
            fed.append(((sequence.prompt_token_ids + sequence.output_token_ids)[: chunk.end], row))
        return scores

    engine.runner.run = run_and_record
    return fed


def scores_until_done(engine) -> list:
    """Every StepLogits the engine's runner hands the sampler until the engine has no work left."""
    handed = []
    engine.runner.__dict__.pop("run", None)
    run = engine.runner.run

    def run_and_keep(chunks, **_):
        scores = run(chunks)  # the logits, whatever the engine asks for
        handed.append(scores)
        return scores

    engine.runner.run = run_and_keep
    try:
        while engine.has_work():
            engine.step()
    finally:
        del engine.runner.run
    return handed


def assert_as_alone(fed: list[tuple[list[int], torch.Tensor]], reference: torch.nn.Module, tolerance: float) -> None:
    """Each recorded row of logits is what the reference computes for its sequence alone."""
    for tokens, row in fed:
        with torch.inference_mode():
            expected = reference(torch.tensor([tokens], device=row.device)).logits[0, -1]
        torch.testing.assert_close(row, expected.to(row.dtype), rtol=tolerance, atol=tolerance)


def steps_with_greedy_tokens(engine, streams: int) -> list:
    """Runs `streams` requests of different lengths to their end; returns the steps whose
    StepLogits came with greedy tokens (the decode step's, not the fused forward's)."""
    rng = random.Random(streams)
    for number in range(streams):
        engine.add_request(f"greedy-{streams}-{number}", [rng.randrange(3, 49152) for _ in range(5 + 20 * number)],
                           SamplingParams(max_tokens=6))
    return [scores for scores in scores_until_done(engine) if scores.greedy is not None]
