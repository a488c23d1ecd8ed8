"""Any local Hugging Face causal-LM directory loads, as does the default model's GGUF file."""

import torch

from common.vocabulary import FinishReason
from inference.engine import LLMEngine, SamplingParams, loader
from tests.inference import models


def test_a_local_hugging_face_directory_loads_and_generates(tmp_path):
    directory = tmp_path / "my-tiny-llama"
    models.tiny_model().save_pretrained(directory)
    models.tokenizer().save_pretrained(directory)

    loaded = loader.load(str(directory), tmp_path / "cache", device="cpu", dtype="float64")
    engine = LLMEngine(loaded.model, loaded.tokenizer, models.limits())
    engine.add_request("r", engine.encode_chat([{"role": "user", "content": "hi"}]),
                       SamplingParams(max_tokens=3))
    outputs = [o for _ in range(10) for o in engine.step()]

    assert loaded.name == "my-tiny-llama"
    assert next(loaded.model.parameters()).dtype == torch.float64
    assert [o.finish_reason for o in outputs][-1] is FinishReason.LENGTH
    assert len(outputs) == 3


def test_the_default_model_is_converted_once_and_then_reused(tmp_path):
    converted = models.default_model_dir()
    stamp = (converted / "model.safetensors").stat().st_mtime_ns

    again = loader.converted_gguf(loader.default_model_path(), converted.parent)

    assert again == converted
    assert (again / "model.safetensors").stat().st_mtime_ns == stamp
    assert not list(converted.parent.glob("*.partial-*"))


def test_cpu_defaults_to_float32_and_cuda_to_bfloat16():
    assert loader.resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert loader.resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    assert loader.resolve_dtype("float16", torch.device("cpu")) == torch.float16
