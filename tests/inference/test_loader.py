"""Any local Hugging Face causal-LM directory loads, as does the default model's GGUF file."""

import logging

import torch

from common.vocabulary import FinishReason
from inference.engine import LLMEngine, SamplingParams, loader
from tests.inference import models


def test_a_local_hugging_face_directory_loads_and_generates(tmp_path, caplog):
    directory = tmp_path / "my-tiny-llama"
    models.tiny_model().save_pretrained(directory)
    models.tokenizer().save_pretrained(directory)

    with caplog.at_level(logging.INFO, logger=loader.__name__):
        loaded = loader.load(str(directory), tmp_path / "cache", device="cpu", dtype="float64")
    engine = LLMEngine(loaded.model, loaded.tokenizer, models.limits())
    engine.add_request("r", engine.encode_chat([{"role": "user", "content": "hi"}]),
                       SamplingParams(max_tokens=3))
    outputs = [o for _ in range(10) for o in engine.step()]

    assert loaded.name == "my-tiny-llama"
    assert next(loaded.model.parameters()).dtype == torch.float64
    assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("precision")] == [
        "precision: float64 on cpu (INFERENCE_DTYPE=float64)"]
    assert [o.finish_reason for o in outputs][-1] is FinishReason.LENGTH
    assert len(outputs) == 3


def test_the_default_model_is_converted_once_and_then_reused(tmp_path):
    converted = models.default_model_dir()
    stamp = (converted / "model.safetensors").stat().st_mtime_ns

    again = loader.converted_gguf(loader.default_model_path(), converted.parent)

    assert again == converted
    assert (again / "model.safetensors").stat().st_mtime_ns == stamp
    assert not list(converted.parent.glob("*.partial-*"))


def test_auto_precision_is_bf16_where_the_device_multiplies_it_natively():
    assert loader.fastest_dtype("cpu", has_bf16=True) == torch.bfloat16
    assert loader.fastest_dtype("cpu", has_bf16=False) == torch.float32
    assert loader.fastest_dtype("cuda", has_bf16=True) == torch.bfloat16
    assert loader.fastest_dtype("cuda", has_bf16=False) == torch.float16
    assert loader.resolve_dtype("float16", torch.device("cpu")) == torch.float16


def test_bfloat16_asked_for_on_a_cpu_without_bf16_units_is_said_to_be_emulated():
    cpu, avx2, bf16 = torch.device("cpu"), frozenset({"avx2", "fma"}), frozenset({"avx2", "avx512_bf16"})

    assert "emulated" in loader.emulated(torch.bfloat16, cpu, avx2)
    assert loader.emulated(torch.bfloat16, cpu, bf16) is None
    assert loader.emulated(torch.float32, cpu, avx2) is None
    assert loader.emulated(torch.bfloat16, torch.device("cuda"), frozenset()) is None


def test_a_cpu_has_bf16_with_avx512_bf16_or_amx_and_not_with_avx512_alone():
    assert loader.cpu_has_bf16(frozenset({"avx2", "avx512f", "avx512_bf16"}))
    assert loader.cpu_has_bf16(frozenset({"avx2", "amx_tile", "amx_bf16"}))
    assert not loader.cpu_has_bf16(frozenset({"avx2", "fma", "avx512f", "avx512_vnni"}))


def test_this_cpus_flags_decide_auto():
    expected = torch.bfloat16 if loader.cpu_has_bf16(loader.cpu_flags()) else torch.float32

    assert loader.resolve_dtype("auto", torch.device("cpu")) == expected


def test_on_a_gpu_attention_leaves_out_cudnns_backend_which_plans_every_new_shape_anew():
    was = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        torch.backends.cuda.enable_cudnn_sdp(True)
        loader.steady_attention(torch.device("cpu"))
        assert torch.backends.cuda.cudnn_sdp_enabled()

        loader.steady_attention(torch.device("cuda"))
        assert not torch.backends.cuda.cudnn_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(was)
