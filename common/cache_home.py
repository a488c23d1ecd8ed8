"""Where the inference service keeps what it makes once per machine (the default model converted
from its GGUF file, our kernels' library) when INFERENCE_CACHE_DIR names no other place: one place
for the service and for the engines the tests build in their own processes, so that a machine
builds each thing once."""

from pathlib import Path


def default() -> Path:
    return Path.home() / ".cache" / "chatapp" / "models"
