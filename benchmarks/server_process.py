"""The servers the inference benchmark measures, each a child process (harness/child_process.py):
the inference service and llama.cpp's server, with their models' names and /metrics."""

from pathlib import Path

import httpx2

from common.metrics import metric_values
from harness import waiting
from harness.child_process import ChildProcess
from harness.ports import free_port
from stack import commands


class ServerProcess(ChildProcess):
    """The inference service."""

    def __init__(self, env: dict[str, str], port: int | None = None):
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        super().__init__(
            "inference-server",
            commands.inference(self.port), {**env, "INFERENCE_PORT": str(self.port)},
            f"{self.base_url}/health")
        self.model_name = ""
        self.matrices: str | None = None  # the layout the service chose (inference/engine/matrices.py)

    def start(self, timeout_s: float = 600.0, poll_s: float = 0.5) -> httpx2.Response:
        response = super().start(timeout_s, poll_s)  # healthy only once the model is loaded
        # Under INFERENCE_COMPILE=auto the service serves while its decode step compiles, on the
        # same cores: what is measured starts once the compile is over.
        if response.json().get("decode_step") == "compiling":
            try:
                waiting.wait_until(lambda: self._health().get("decode_step") != "compiling",
                                   timeout_s, "the decode step to compile")
            except TimeoutError:
                self.stop()
                raise
        self.model_name = response.json()["model"]
        self.matrices = response.json().get("matrices")
        return response

    def _health(self) -> dict:
        return httpx2.get(self.ready_url, timeout=2.0).json()

    # --- metrics ---
    async def metrics(self, client: httpx2.AsyncClient) -> dict[str, float]:
        """The unlabelled samples of /metrics, by name (labelled ones are summed per name)."""
        response = await client.get(f"{self.base_url}/metrics")
        return metric_values(response.text)


class LlamaServerProcess(ChildProcess):
    """llama.cpp's server on one GGUF file, with `slots` sequences decoding side by side.

    Each slot gets 2,048 tokens of context (enough for every prompt + answer the benchmark and the
    tests send; our server defaults to the model's whole 8,192), and keeps its last prompt's cache for the next request that shares it (llama.cpp
    caches prompts unless a request says `cache_prompt: false`)."""

    CONTEXT_PER_SLOT = 2048

    def __init__(self, binary: Path, gguf: Path, slots: int, threads: int, alias: str,
                 port: int | None = None):
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.model_name = alias
        super().__init__(
            f"llama-server-{slots}",
            [str(binary), "--model", str(gguf), "--alias", alias,
             "--host", "127.0.0.1", "--port", str(self.port),
             "--parallel", str(slots), "--ctx-size", str(slots * self.CONTEXT_PER_SLOT),
             "--threads", str(threads), "--threads-batch", str(threads),
             "--metrics", "--no-webui",
             # No repacked weights: on CPUs that list AMX, 0.3.36's AMX kernels trap with an
             # invalid opcode (tilezero on unconfigured tiles) on this project's machines; they
             # only serve quantised weights, which no benchmark compares.
             "--no-repack"],
            None, f"{self.base_url}/health")

    def start(self, timeout_s: float = 120.0, poll_s: float = 0.2) -> httpx2.Response:
        return super().start(timeout_s, poll_s)  # /health answers 503 until the model is loaded

