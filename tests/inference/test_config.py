"""The inference service reads its knobs from the environment and refuses bad ones by name."""

import pytest

from inference.config import InferenceConfig


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
    ("INFERENCE_DEVICE", "tpu"),
    ("INFERENCE_DTYPE", "int4"),
    ("INFERENCE_MAX_RUNNING", "0"),
])
def test_a_bad_value_is_refused_naming_the_variable(monkeypatch, variable, value):
    monkeypatch.setenv(variable, value)

    with pytest.raises(ValueError, match=variable):
        InferenceConfig.from_env()
