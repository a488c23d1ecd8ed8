"""The inference service reads its knobs from the environment and refuses bad ones by name,
those this machine cannot serve too (`python -m inference --check`, which `make run` asks first)."""

import os
import subprocess

import pytest
import torch

from harness.child_process import REPO_DIR
from inference.config import InferenceConfig
from stack import commands


def test_defaults_bind_loopback_on_8001_with_the_default_model():
    config = InferenceConfig()

    assert (config.host, config.port, config.model, config.device) == ("127.0.0.1", 8001, "", "auto")


def test_the_environment_sets_the_knobs_and_command_line_flags_win(monkeypatch):
    monkeypatch.setenv("INFERENCE_PORT", "9100")
    monkeypatch.setenv("INFERENCE_MAX_RUNNING", "16")
    monkeypatch.setenv("INFERENCE_DEVICE", "cpu")

    config = InferenceConfig.from_env(port=9200, host=None)

    assert (config.port, config.max_running, config.device, config.host) == (9200, 16, "cpu", "127.0.0.1")


def test_short_dtype_names_stand_for_torchs_own(monkeypatch):
    monkeypatch.setenv("INFERENCE_DTYPE", "bf16")

    assert InferenceConfig.from_env().dtype == "bfloat16"
    assert InferenceConfig(dtype="fp32").dtype == "float32"


@pytest.mark.parametrize("variable, value", [
    ("INFERENCE_PORT", "eighty"),
    ("INFERENCE_PORT", "70000"),
    ("INFERENCE_DEVICE", "tpu"),
    ("INFERENCE_DTYPE", "int4"),
    ("INFERENCE_COMPILE", "sometimes"),
    ("INFERENCE_MAX_RUNNING", "0"),
])
def test_a_bad_value_is_refused_naming_the_variable(monkeypatch, variable, value):
    monkeypatch.setenv(variable, value)

    with pytest.raises(ValueError, match=variable):
        InferenceConfig.from_env()


def test_a_port_given_on_the_command_line_is_held_to_the_range_of_ports():
    with pytest.raises(ValueError, match="INFERENCE_PORT"):
        InferenceConfig(port=70000)


def test_the_context_is_left_to_the_model_unless_configured(monkeypatch):
    from inference.service import InferenceService

    assert InferenceService(InferenceConfig()).engine_config().max_model_len is None
    monkeypatch.setenv("INFERENCE_MAX_MODEL_LEN", "1000")
    assert InferenceService(InferenceConfig.from_env()).engine_config().max_model_len == 1000
    monkeypatch.setenv("INFERENCE_MAX_MODEL_LEN", "-1")
    with pytest.raises(ValueError, match="INFERENCE_MAX_MODEL_LEN"):
        InferenceConfig.from_env()


def test_every_engine_knob_reaches_the_engine_under_its_own_name():
    from inference.engine.matrices import MatrixLayout
    from inference.service import InferenceService

    config = InferenceConfig(max_running=11, max_cached_tokens=12345, max_model_len=1000,
                             prefill_chunk=300, prefill_chunk_idle=400, cache_group_size=3,
                             prefill_chunk_min=7, prefix_cache=False, prefill_stretch=1.3,
                             prefill_stretch_streams=5, prefix_cache_tokens=999, matrices="plain")

    limits = InferenceService(config).engine_config()

    assert (limits.max_running, limits.max_cached_tokens, limits.max_model_len) == (11, 12345, 1000)
    assert (limits.prefill_chunk, limits.prefill_chunk_idle, limits.prefill_chunk_min) == (300, 400, 7)
    assert (limits.cache_group_size, limits.reuse_prefixes, limits.max_kept_tokens) == (3, False, 999)
    assert (limits.prefill_stretch, limits.prefill_stretch_streams) == (1.3, 5)
    assert limits.matrices is MatrixLayout.PLAIN


@pytest.mark.process
@pytest.mark.parametrize("variable, value, told", [
    ("INFERENCE_CACHE_DIR", "/proc/nope", "cannot be created"),
    ("INFERENCE_CACHE_DIR", "/proc", "cannot be written"),
    pytest.param("INFERENCE_DEVICE", "cuda", "no CUDA device",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")),
])
def test_the_check_refuses_in_one_line_a_setting_this_machine_cannot_serve(variable, value, told):
    """Before, the check passed and the service logged a traceback as it loaded, answering 503
    for ever while `make run` waited for it."""
    finished = subprocess.run(commands.inference_check(), cwd=REPO_DIR, env={**os.environ, variable: value},
                              capture_output=True, text=True, timeout=60)

    lines = [line for line in (finished.stdout + finished.stderr).splitlines() if line.strip()]
    assert finished.returncode == 2
    assert len(lines) == 1, "\n".join(lines)
    assert lines[0].startswith(f"inference: {variable}") and told in lines[0]
