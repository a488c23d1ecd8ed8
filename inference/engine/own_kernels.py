"""Our own CPU kernels, one library of torch operators: `chatapp::dot_rows`, the product of a
few rows by a weight matrix (kernels/dot_rows.cpp), `chatapp::decode_attention_rows`, a decode
step's attention over the cache, each row found through a table (row_table.py), and `store_rows`,
the step's keys and values written through that table (kernels/decode_attention.cpp), and
`chatapp.DecodeModel`, a whole decode step of a plain Llama over the same products and attention
(kernels/decode_step.cpp, native_step.py), and `draw_tokens`, the sampler's draw of a sampled
token (kernels/token_draw.cpp, sampler.py).

It is built where the model loads, with the C++ compiler torch.compile uses on a CPU, against
this torch's headers, for the widest instructions this CPU has (`INSTRUCTION_SETS`: float32 with
AVX2 or AVX-512, bfloat16 products too with AVX-512 BF16), once per sources, flags and torch
version (the library is kept under the cache directory and loaded from there at later starts);
a CPU without AVX2 and FMA, or a machine without a compiler, goes without it: the matrices keep
torch's or oneDNN's product (matrices.py), the compiled step its products-and-sums attention
(decode_graph.py). torch.compile sees the operators through their shape rules (`_shape`,
`_attention_shape`), so the compiled decode step calls them like any other; its generated code
calls their C entry points (kernels/shim.h, `C_SHIMS`) rather than torch's dispatcher.
"""

import ctypes
import hashlib
import logging
import os
import re
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils import cpp_extension

from common import build_lock, cache_home, env

from .loader import cpu_flags

logger = logging.getLogger(__name__)

# One library, its operators: `chatapp::dot_rows`, `decode_attention_rows`, `store_rows`,
# `draw_tokens`, and the class `DecodeModel`.
SOURCES = tuple(Path(__file__).with_name("kernels") / name
                for name in ("dot_rows.cpp", "decode_attention.cpp", "decode_step.cpp", "token_draw.cpp"))
# What the sources include of ours: read into the library's key with them.
HEADERS = tuple(Path(__file__).with_name("kernels") / name
                for name in ("shim.h", "dot_tiles.h", "attention_tasks.h", "step_threads.h"))
# -fno-trapping-math: nothing here reads floating-point exceptions, and a comparison that might
# trap keeps the compiler from vectorising a loop with a branchless clamp (kernels/token_draw.cpp).
COMPILE_FLAGS = ("-O3", "-fopenmp", "-fno-trapping-math", "-shared", "-fPIC", "-std=c++17")


@dataclass(frozen=True)
class InstructionSet:
    cpu_flags: frozenset[str]  # as /proc/cpuinfo names them
    compile_flags: tuple[str, ...]
    dtypes: tuple[torch.dtype, ...]  # what the kernel multiplies when built for it
    # What the native step may screen its output matrix in (kernels/decode_step.cpp's `Screen`),
    # the one it takes first: int8 levels with AVX-512, where a float32 step through them
    # took 0.97x-1.00x the time of one through a bfloat16 copy at one to sixteen rows, in turns
    # (an Intel Xeon with AMX; BENCHMARKS.md; the bfloat16 screen is gone since); float16 with
    # AVX2 alone, where int8 is not measured. int8 takes every matrix float16 does (a finite
    # one), so float16 serves AVX-512 builds in tests alone.
    screens: tuple[torch.dtype, ...]


# F16C: float16's conversions (the screen's); every CPU with AVX2 has it.
_AVX2_FLAGS = frozenset({"avx2", "fma", "f16c"})
_AVX2 = ("-mavx2", "-mfma", "-mf16c")
# Widest first: the first whose flags this CPU has is built.
INSTRUCTION_SETS = (
    InstructionSet(_AVX2_FLAGS | {"avx512f", "avx512bw", "avx512vl", "avx512_bf16"},
                   (*_AVX2, "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512bf16"),
                   (torch.float32, torch.bfloat16), (torch.int8, torch.float16)),
    InstructionSet(_AVX2_FLAGS | {"avx512f"}, (*_AVX2, "-mavx512f"), (torch.float32,),
                   (torch.int8, torch.float16)),
    InstructionSet(_AVX2_FLAGS, _AVX2, (torch.float32,), (torch.float16, torch.int8)),
)
# What decode_attention_rows takes (kernels/decode_attention.cpp: kMostDim); other heads and dtypes
# (float64 in tests, float16) go to torch's attention or products and sums.
ATTENTION_DTYPES = (torch.float32, torch.bfloat16)
ATTENTION_MOST_DIM = 256
# What draw_tokens draws from (kernels/token_draw.cpp); other logits go to the sampler's torch draw.
DRAW_DTYPES = (torch.float32, torch.bfloat16)
# C++ compilers torch.compile (inductor) may call on a CPU, in its order, unless CXX names one.
CPU_COMPILERS = ("g++", "c++", "clang++")

# Each operator's C entry point as kernels/shim.h declares it, one a line (the generated code
# declares it so, inductor's `aot_inductor.custom_ops_to_c_shims`, and calls it by name rather
# than through torch's dispatcher): operator -> declaration.
C_SHIMS = {name: declaration for declaration, name in re.findall(
    r"^(AOTITorchError aoti_torch_cpu_(\w+)\(.*\));$", HEADERS[0].read_text(), flags=re.MULTILINE)}

_lock = threading.Lock()
# Empty until the first load; then the instruction set the loaded library was built for, or why
# there is none.
_outcome: list[InstructionSet | str] = []


def cpu_compiler() -> str | None:
    """The C++ compiler inductor would call here, or None."""
    named = env.string("CXX")
    return shutil.which(named) if named else next(filter(None, map(shutil.which, CPU_COMPILERS)), None)


def load(cache_dir: Path | None = None) -> str | None:
    """Makes torch.ops.chatapp's operators available, building the library the first time;
    returns why they cannot be, or None. The outcome holds for the process: the first call
    decides."""
    with _lock:
        if not _outcome:
            _outcome.append(_load(cache_dir))
            if isinstance(_outcome[0], str):
                logger.info("our own kernels: not used (%s)", _outcome[0])
        return _outcome[0] if isinstance(_outcome[0], str) else None


def dtypes(cache_dir: Path | None = None) -> tuple[torch.dtype, ...]:
    """What dot_rows multiplies on this machine (loading it the first time); none if it cannot."""
    return () if load(cache_dir) else _outcome[0].dtypes


def screens(cache_dir: Path | None = None) -> tuple[torch.dtype, ...]:
    """What the native step may screen its output matrix in here (a bfloat16 model's: int8
    alone), the first preferred; none if our kernels cannot load."""
    return () if load(cache_dir) else _outcome[0].screens


def attends(device: torch.device, dtype: torch.dtype, head_dim: int, cache_dir: Path | None = None) -> bool:
    """Whether decode_attention_rows serves heads of this size and dtype here (loading the library
    the first time)."""
    return (device.type == "cpu" and dtype in ATTENTION_DTYPES and head_dim <= ATTENTION_MOST_DIM
            and load(cache_dir) is None)


def draws(logits: torch.Tensor) -> bool:
    """Whether draw_tokens draws from these logits here: on a CPU, float32 or bfloat16, once the
    library has loaded (the sampler never builds it: the model runner loads it at start)."""
    return (logits.device.type == "cpu" and logits.dtype in DRAW_DTYPES
            and bool(_outcome) and not isinstance(_outcome[0], str))


class ShimTable(dict):
    """inductor's `custom_ops_to_c_shims`: operator -> its C declarations. Read into inductor's
    cache key by the operators' names: an operator itself does not pickle, and a key that cannot
    be made bypasses the cache (the step compiled again at every start)."""

    def __reduce_ex__(self, protocol):
        return dict, ({str(operator): declarations for operator, declarations in self.items()},)


def c_shims() -> ShimTable:
    """Our operators' C entry points for inductor: none until the library has loaded."""
    if not _outcome or isinstance(_outcome[0], str):
        return ShimTable()
    return ShimTable({getattr(torch.ops.chatapp, name).default: [declaration] for name, declaration in C_SHIMS.items()})


def instruction_set(flags: frozenset[str]) -> InstructionSet | None:
    return next((each for each in INSTRUCTION_SETS if each.cpu_flags <= flags), None)


def _load(cache_dir: Path | None) -> InstructionSet | str:
    """The instruction set of the library built (or found) and loaded, or why it is not."""
    instructions = instruction_set(cpu_flags())
    if instructions is None:
        return f"this CPU lacks {', '.join(sorted(INSTRUCTION_SETS[-1].cpu_flags - cpu_flags()))}"
    if not torch.backends.openmp.is_available():
        return "this torch was built without OpenMP"
    compiler = cpu_compiler()
    if compiler is None:
        return "no C++ compiler on PATH"
    try:
        # The user's own directory where no cache is named (the service's default): a library
        # loaded from a shared one (/tmp) could be another user's.
        library = _built(compiler, instructions, (cache_dir or cache_home.default()) / "kernels")
        # Its symbols global: the compiled step's generated code calls the C entry points by name.
        ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)
    except subprocess.CalledProcessError as error:
        return f"{compiler} could not build it: {(error.stderr or '').strip()[-500:]}"
    except (OSError, RuntimeError) as error:
        return f"it did not build or load: {error}"
    torch.library.register_fake("chatapp::dot_rows")(_shape)
    torch.library.register_fake("chatapp::decode_attention_rows")(_attention_shape)
    return instructions


def source_digest() -> str:
    """A digest of our kernels' sources: what a build of them, and what was timed with one, is of."""
    return hashlib.sha256("\0".join(_source_texts()).encode()).hexdigest()


def _source_texts() -> list[str]:
    return [source.read_text() for source in (*SOURCES, *HEADERS)]


def _built(compiler: str, instructions: InstructionSet, directory: Path) -> Path:
    """The kernel's shared library for this source, flags and torch, compiled if not yet there."""
    flags = [*COMPILE_FLAGS, *instructions.compile_flags,
             f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"]
    key = hashlib.sha256("\0".join([*_source_texts(), torch.__version__, compiler, *flags]).encode()).hexdigest()[:16]
    library = directory / f"chatapp-kernels-{key}.so"
    build_lock.build_once(library.with_suffix(".lock"), library.exists,
                          lambda: _compile(compiler, flags, library))
    return library


def _compile(compiler: str, flags: list[str], library: Path) -> None:
    partial = library.with_name(f"{library.name}.partial-{os.getpid()}")
    include = [f"-I{path}" for path in cpp_extension.include_paths()]
    link = [f"-L{path}" for path in cpp_extension.library_paths()]
    rpath = [f"-Wl,-rpath,{path}" for path in cpp_extension.library_paths()]
    logger.info("building our own kernels into %s (once per machine; 20-70 s)", library)
    try:
        subprocess.run([compiler, *flags, *include, *map(str, SOURCES), "-o", str(partial), *link, *rpath,
                        "-lc10", "-ltorch_cpu"], check=True, capture_output=True, text=True)
        os.replace(partial, library)  # atomic: a process loading it never sees half a library
    finally:
        partial.unlink(missing_ok=True)


def _shape(rows: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """What torch.compile needs of the operator to trace it: the product's shape and dtype."""
    return rows.new_empty((rows.shape[0], weight.shape[0]))


def _attention_shape(queries, *_) -> torch.Tensor:
    return torch.empty_like(queries, memory_format=torch.contiguous_format)
