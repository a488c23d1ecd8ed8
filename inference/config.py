"""The inference service's configuration: one frozen dataclass, read from the environment once."""

import math
import tempfile
from dataclasses import dataclass, field, fields
from pathlib import Path

from common import cache_home, env, inference_address
from common.inference_address import DEFAULT_HOST, DEFAULT_PORT

DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("auto", "float32", "bfloat16", "float16", "float64")
MATRICES = ("auto", "plain", "packed", "dot")
COMPILE_MODES = ("auto", "on", "off")
CAPTURE_MODES = ("auto", "off", "calls")
# Short names people type; the configuration holds torch's own name.
DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "fp64": "float64"}


@dataclass(frozen=True)
class InferenceConfig:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    # A Hugging Face model directory or a .gguf file; empty means the default model's GGUF file.
    model: str = ""
    # The name clients send as `model`; empty means the model directory's or file's name.
    model_name: str = ""
    device: str = "auto"
    dtype: str = "auto"
    # torch threads; 0 keeps torch's default (one per core).
    threads: int = 0
    # Ask for the weights in 2 MB pages where the kernel gives them on request (huge_pages.py):
    # `python -m inference` then starts itself again with glibc's malloc told so.
    huge_pages: bool = True
    # How the weight matrices are multiplied: "plain" (torch's product, oneMKL on a CPU),
    # "packed" (oneDNN's layout, CPU only), "dot" (our own kernel: float32 on a CPU with AVX2,
    # bfloat16 too with AVX-512 BF16; built with the C++ compiler at the first start), "auto" (each that can run here timed at
    # load, the fastest kept).
    matrices: str = "auto"
    # Whether decode steps run as one compiled graph (torch.compile;
    # inference/engine/decode_graph.py): "auto" where a compiler is found, compiled in the
    # background while the fused forward serves (about 100 s of a 2-core CPU at every start),
    # then used for each kind of step only where it timed faster than the fused forward
    # (step_trial.py); "on" compiled before the service is ready and always used, or fail to
    # load; "off" never. On a 2-core AMD EPYC, its kernels called from C++, steps of 1-4 streams
    # with short contexts were 18-23% shorter in fp32 and bf16 alike (BENCHMARKS.md).
    compile: str = "auto"
    # Where "compile" is not "off", whether a decode step runs as one call of our own C++
    # (inference/engine/native_step.py: every layer in one parallel region of the threads, ready
    # at once, no compiler run) where it can: a plain Llama whose matrices are our own kernel's
    # (INFERENCE_MATRICES chose or named "dot"), float32 or bfloat16, on a CPU. Elsewhere, or
    # off, the compiled graph. "compile" decides as for the graph: auto timed against the fused
    # forward for each kind of step, on always used.
    native_step: bool = True
    # Where the compiled graph serves decode steps on a GPU, whether they replay CUDA graphs,
    # one captured for each bucket of streams and context (inference/engine/captured_steps.py):
    # "auto" on a GPU, "off" never; "calls" runs the same buckets and static tensors without a
    # graph, on any device (what the CPU's tests run of the GPU's path).
    capture: str = "auto"
    max_running: int = 64
    # Requests beyond this many waiting are refused with 429 before any stream starts.
    max_waiting: int = 256
    # KV cache budget in tokens, reserved per request as prompt + max_tokens.
    max_cached_tokens: int = 49152
    # Longest prompt + answer; 0 means the model's own context (max_position_embeddings), which
    # also caps a larger value, as does what one sequence may hold of max_cached_tokens.
    max_model_len: int = 0
    # Prompt tokens per step while other streams decode: as many as keep the step within
    # prefill_stretch times a plain decode step, at least prefill_chunk_min and at most
    # prefill_chunk (before any step was timed: prefill_chunk_min plus one per running stream).
    # A long prompt is fed in chunks so that running streams keep their pace.
    prefill_chunk: int = 512
    prefill_chunk_min: int = 16
    # A step that feeds prompt tokens beside prefill_stretch_streams or more decoding streams
    # may cost up to this many times a plain decode step, by what steps cost on this machine
    # (learned while serving); beside fewer streams the stretch grows so that the stall summed
    # over them stays the same, and where more prompts than prefill_stretch_streams are being fed
    # it may grow to theirs.
    prefill_stretch: float = 1.7
    prefill_stretch_streams: int = 16
    # Prompt tokens per step when nothing else is running.
    prefill_chunk_idle: int = 512
    # Cache rows per group; a group's memory is sized for its longest member.
    cache_group_size: int = 4
    # Keep finished sequences' cache rows so that a prompt starting with the same tokens (the
    # next turn of a conversation, a shared system prompt) is fed only the rest.
    prefix_cache: bool = True
    # Tokens that kept rows may hold between them (about 45 KB each for the default model in
    # fp32): they stay resident until a request needs the memory or this budget is passed.
    prefix_cache_tokens: int = 8192
    default_max_tokens: int = 512
    # Request bodies beyond this many bytes are refused with 413 before they are read whole:
    # a prompt that fits max_model_len is far smaller, and encoding a huge one costs seconds.
    max_body_bytes: int = 1_048_576
    cache_dir: Path = field(default_factory=cache_home.default)

    def __post_init__(self) -> None:
        if self.device not in DEVICES:
            raise ValueError(f"INFERENCE_DEVICE must be one of {DEVICES}, got {self.device!r}")
        object.__setattr__(self, "dtype", DTYPE_ALIASES.get(self.dtype, self.dtype))
        if self.dtype not in DTYPES:
            raise ValueError(f"INFERENCE_DTYPE must be one of {DTYPES} (or {tuple(DTYPE_ALIASES)}), "
                             f"got {self.dtype!r}")
        if self.matrices not in MATRICES:
            raise ValueError(f"INFERENCE_MATRICES must be one of {MATRICES}, got {self.matrices!r}")
        if self.compile not in COMPILE_MODES:
            raise ValueError(f"INFERENCE_COMPILE must be one of {COMPILE_MODES}, got {self.compile!r}")
        if self.capture not in CAPTURE_MODES:
            raise ValueError(f"INFERENCE_CAPTURE must be one of {CAPTURE_MODES}, got {self.capture!r}")
        if self.max_model_len < 0:
            raise ValueError(f"INFERENCE_MAX_MODEL_LEN must be 0 (the model's own) or more, "
                             f"got {self.max_model_len}")
        if not 1 <= self.port <= env.HIGHEST_PORT:
            raise ValueError(f"INFERENCE_PORT (or --port) must be a port, 1 to {env.HIGHEST_PORT}, got {self.port}")
        positive = ["max_running", "max_waiting", "max_cached_tokens",
                    "prefill_chunk", "prefill_chunk_min", "prefill_chunk_idle", "cache_group_size", "default_max_tokens",
                    "max_body_bytes", "prefix_cache_tokens", "prefill_stretch_streams"]
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"INFERENCE_{name.upper()} must be at least 1, got {getattr(self, name)}")
        if not 1.0 < self.prefill_stretch < math.inf:
            raise ValueError(f"INFERENCE_PREFILL_STRETCH must be above 1, got {self.prefill_stretch}")
        if self.threads < 0:
            raise ValueError(f"INFERENCE_THREADS must be 0 (torch's default) or more, got {self.threads}")
        # Nothing is downloaded: a model that is not on this disk never loads.
        if self.model and not Path(self.model).exists():
            raise ValueError(f"INFERENCE_MODEL={self.model} does not exist: a Hugging Face model "
                             "directory or a .gguf file would do (empty: the default model)")

    def check_cache_dir(self) -> None:
        """Raises ValueError naming INFERENCE_CACHE_DIR unless this process can create the
        directory and write in it (the default model is converted into it as it loads)."""
        try:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ValueError(f"INFERENCE_CACHE_DIR={self.cache_dir} cannot be created ({error.strerror}): "
                             "a directory this user may write would do (empty: ~/.cache/chatapp/models)") from error
        try:
            tempfile.TemporaryFile(dir=self.cache_dir).close()
        except OSError as error:
            raise ValueError(f"INFERENCE_CACHE_DIR={self.cache_dir} cannot be written ({error.strerror}): "
                             "a directory this user may write would do (empty: ~/.cache/chatapp/models)") from error

    @classmethod
    def from_env(cls, **overrides) -> "InferenceConfig":
        try:
            values = dict(
                host=env.string("INFERENCE_HOST", cls.host),
                port=inference_address.port(),
                model=env.string("INFERENCE_MODEL"),
                model_name=env.string("INFERENCE_MODEL_NAME"),
                device=env.string("INFERENCE_DEVICE", cls.device),
                dtype=env.string("INFERENCE_DTYPE", cls.dtype),
                threads=env.integer("INFERENCE_THREADS", cls.threads),
                huge_pages=env.boolean("INFERENCE_HUGE_PAGES", cls.huge_pages),
                matrices=env.string("INFERENCE_MATRICES", cls.matrices),
                compile=env.string("INFERENCE_COMPILE", cls.compile),
                native_step=env.boolean("INFERENCE_NATIVE_STEP", cls.native_step),
                capture=env.string("INFERENCE_CAPTURE", cls.capture),
                max_running=env.integer("INFERENCE_MAX_RUNNING", cls.max_running),
                max_waiting=env.integer("INFERENCE_MAX_WAITING", cls.max_waiting),
                max_cached_tokens=env.integer("INFERENCE_MAX_CACHED_TOKENS", cls.max_cached_tokens),
                max_model_len=env.integer("INFERENCE_MAX_MODEL_LEN", cls.max_model_len),
                prefill_chunk=env.integer("INFERENCE_PREFILL_CHUNK", cls.prefill_chunk),
                prefill_chunk_min=env.integer("INFERENCE_PREFILL_CHUNK_MIN", cls.prefill_chunk_min),
                prefill_stretch=env.number("INFERENCE_PREFILL_STRETCH", cls.prefill_stretch),
                prefill_stretch_streams=env.integer("INFERENCE_PREFILL_STRETCH_STREAMS",
                                                    cls.prefill_stretch_streams),
                prefill_chunk_idle=env.integer("INFERENCE_PREFILL_CHUNK_IDLE", cls.prefill_chunk_idle),
                cache_group_size=env.integer("INFERENCE_CACHE_GROUP_SIZE", cls.cache_group_size),
                prefix_cache=env.boolean("INFERENCE_PREFIX_CACHE", cls.prefix_cache),
                prefix_cache_tokens=env.integer("INFERENCE_PREFIX_CACHE_TOKENS", cls.prefix_cache_tokens),
                default_max_tokens=env.integer("INFERENCE_DEFAULT_MAX_TOKENS", cls.default_max_tokens),
                max_body_bytes=env.integer("INFERENCE_MAX_BODY_BYTES", cls.max_body_bytes),
                cache_dir=Path(env.string("INFERENCE_CACHE_DIR") or cache_home.default()),
            )
        except env.BadVariable as error:
            raise ValueError(str(error)) from error
        known = {f.name for f in fields(cls)}
        values.update({key: value for key, value in overrides.items() if key in known and value is not None})
        return cls(**values)
