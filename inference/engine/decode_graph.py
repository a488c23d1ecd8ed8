"""A decode step as one compiled graph: the host's per-operation work gone (native_step.py's C++
step serves instead where it runs: our own matrices, float32 or bfloat16, a CPU).

A decode step at one stream runs about 1,400 small torch operations around its 121 weight
products (norms, rotary, slices, residuals, attention's bookkeeping); on a CPU each costs
microseconds of dispatch, together about as much as the products at bf16 (BENCHMARKS.md, "The
step"). Here torch.compile (inductor) turns every layer of the step into one call: the small
operations fused into a few loops per layer, the products called straight from the generated
code on the fused forward's own matrices (oneDNN's packed ones where matrices.py packed them,
given to inductor as constants by its "freezing", which is what lets it call oneDNN's kernels).

The graph only reads the cache. Each layer's new key and value join attention as one more
score in the softmax over the cached keys, and every layer's new keys and values are stored
after the call: through the same table with our attention (`store_rows`), else in one indexed
write. A mutated input would cost a copy of the whole cache per step under torch.compile's
functional graphs; a read-only one costs nothing, and its shapes may move freely.

Attention, two ways (graph_step.py, `GraphStep._attend`). Where our own kernel runs (own_kernels.py: a CPU, float32
or bfloat16), the graph is given a table of where each decoding row's keys and values are
(row_table.py), so one step may take streams of any cache groups: from five streams on, every
step spans several (the cache's groups hold four rows), and at four most did. Elsewhere (a GPU,
float64) attention is written out as products and sums, which inductor fuses into loops over a
batch: the decoding rows' cached keys and values copied out of their groups, whichever they are
(group_view.gather), the cached length rounded up to whole cache blocks and masked. The copy is
the price of one graph for every step: on the lent GPU, steps of several groups (which the graph
once refused) and of a group's first row (refused at a guard on a view's offset) ran the fused
forward, a kernel launch at a time (BENCHMARKS.md, the GPU section).
On a GPU those steps then replay a CUDA graph captured for their bucket of rows and cached
length (captured_steps.py): the graph's kernels launched in one call, not one at a time from
inductor's Python wrapper.

Shapes: the rows (and the cached length where the graph reads a copied batch) are symbols, so
the graph compiles once, at load, and not again while serving: a step shaped otherwise runs
through the fused forward instead (set_stance("fail_on_recompile")), as do steps that feed a
prompt. A compile costs a minute or two of both cores on a small CPU, at every start where the
matrices are oneDNN's (inductor cannot cache a graph whose constants are oneDNN tensors; with
plain matrices it keeps what it compiled under the cache directory). Without a C++ compiler
(inductor's, on a CPU), the fused forward serves every step and the log says why.

Memory: the graph reads the fused forward's tensors, so the weights exist once (an earlier
version let inductor pack its own copy: 430 MB more for the default model in bf16); what the
graph adds is its code and inductor's working memory.
"""

import logging
import os
import time
import types
from enum import StrEnum
from pathlib import Path

import torch

from . import group_view, own_kernels
from .attention import DecodeRows, GroupDecode, StepLayout
from .captured_steps import CapturedSteps, CaptureMode
from .graph_call import GraphCall
from .graph_step import GraphStep
from .kv_cache import BLOCK_TOKENS
from .matrices import MatrixLayout
from .row_table import row_table
from .sampler import StepLogits

logger = logging.getLogger(__name__)

# The fewest elements a generated kernel shares among OpenMP's threads (inductor's default: 512).
# A step's norms, rotary and activations are a few rows wide (at most 4 x 3,072 elements here):
# forking and joining the threads for each cost more than the work, and the thread left waiting
# meanwhile is what perf called libgomp's spinning. At this size every such kernel runs on one
# thread; the products and attention keep theirs. In turns against the fused forward (fp32, an
# AVX2 AMD EPYC, two runs each): one stream 0.93x and 1.00x its time against 1.05x twice with the
# default; four streams 0.81x twice against 0.84x and 0.83x. Since the rows' count became
# unbacked (`_call_rows`, `_call_gathered`), inductor sizes these loops by its hint (8,192 rows), far
# above this, so each kernel opens a parallel region again; running them all on one thread
# (`cpp.threads=1`) measured 0.99x / 0.98x / 1.02x / 1.03x the step's time at 1 / 4 / 16 / 64
# streams, in turns in one process (BENCHMARKS.md): not worth it, so this stays as it was.
SERIAL_KERNEL_ELEMENTS = 1 << 20


# The generated code's own checks, each step, of what the graph's guards and our operators
# already check: every input's and every operator output's sizes and strides, alignment and
# scalar values. About 200 inputs a step (the weights among them) whose tensors' metadata lie
# cold in the cache after the weights stream through.
UNCHECKED = {"size_asserts": False, "alignment_asserts": False, "scalar_asserts": False}


class CompileMode(StrEnum):
    AUTO = "auto"  # compile where a compiler is found, else the fused forward alone
    ON = "on"  # compile, or fail to load
    OFF = "off"  # the fused forward alone


# torch.compile's message when a step would compile again under set_stance("fail_on_recompile"):
# a plain RuntimeError, told from others by its words.
RECOMPILE_REFUSED = "Detected recompile when torch.compile stance is 'fail_on_recompile'"


def compiler_missing(device: torch.device) -> str | None:
    """Why inductor cannot compile here, or None when it may (the warm-up compile proves it)."""
    if device.type == "cpu" and own_kernels.cpu_compiler() is None:
        return "no C++ compiler on PATH (inductor needs one on a CPU; install g++)"
    if device.type == "cuda":
        try:
            import triton  # noqa: F401  (inductor's GPU code generator)
        except ImportError:
            return "triton is not installed"
    return None


class DecodeGraph:
    """Runs a decode step through the compiled graph, or says it cannot."""

    def __init__(self, fused, kv_cache, own_attention: bool, cache_dir: Path | None = None,
                 capture: CaptureMode = CaptureMode.AUTO):
        self.kv_cache = kv_cache
        self.device = fused.norm.device
        if cache_dir is not None:  # what inductor compiles outlives the process and the machine's /tmp
            os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir / "inductor"))
        self.module = GraphStep(fused, own_attention).eval()
        # No guards on the module's own attributes (its 210 matrices and norms, its constants):
        # checking them before every step cost about 400 us of a 10 ms bf16 step
        # (TORCH_LOGS=guards: "Guard eval latency" 394-542 us with them, 144-160 without), and
        # they never change once the module is built. Those guards were also what told one
        # GraphStep from another (torch.compile keeps its graphs on the code it traced), so this
        # module's forward runs a copy of the code, its graphs this module's alone. The inputs'
        # guards stay: a step shaped or typed otherwise still falls back (`run`).
        self.module.forward = types.MethodType(_copy(GraphStep.forward), self.module)
        self.compiled = torch.compile(self.module, backend=self._compile, dynamic=True, fullgraph=True,
                                      options={"guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe})
        # The compiled code called without torch.compile's frame once it compiled (graph_call.py),
        # either way of attention; `_compiling_for` holds the compiling call's own tensors.
        self.direct: GraphCall | None = None
        self._compiling_for: tuple[torch.Tensor, ...] | None = None
        self.num_steps = 0  # steps the graph ran
        self.num_fallbacks = 0  # steps it left to the fused forward, their shapes not compiled
        # Steps of a gathered batch replayed from a graph captured for their bucket
        # (captured_steps.py): on a GPU, unless asked otherwise; on a CPU only as asked (tests).
        captures = capture is CaptureMode.CALLS or (capture is CaptureMode.AUTO and self.device.type == "cuda")
        self.captured = None
        if captures and not own_attention:
            self.captured = CapturedSteps(self._call_static, kv_cache, cuda_graphs=capture is CaptureMode.AUTO)

    def warm(self) -> float:
        """Compiles the graph on a scratch group shaped as the cache's; returns the seconds it took.

        The call goes the way a served step goes (`_call_rows`, `_call_gathered`), so the graph's
        guards (dtypes, strides, inference mode) hold for the steps to come: through the table,
        more rows and capacity than it reads, past the first row, so that no size or stride of the
        scratch group equals another by chance; as a gathered batch, contiguous.
        """
        started = time.perf_counter()
        shape = self.kv_cache.shape
        count = 2  # any: the rows' count is unbacked (`_call_rows`), so no count is compiled for
        size = (shape.num_layers, count + 2, shape.num_kv_heads, 3 * BLOCK_TOKENS, shape.head_dim)
        keys = torch.zeros(size, dtype=shape.dtype, device=self.device)
        values = torch.zeros_like(keys)
        # Freezing: the weights become the graph's constants (inductor calls oneDNN's kernels
        # only on constants), by reference. On a CPU the generated code calls its kernels from
        # C++ rather than from a Python wrapper (bf16 steps took 0.72-0.82x the fused forward's
        # time with it, 0.81-0.91x with Python's; BENCHMARKS.md), ours by their C entry points.
        cpp_wrapper = self.device.type == "cpu"
        freezing = self.module.layout is MatrixLayout.PACKED
        # The compiler's own modules here, not at the top: importing them took 3-4 s of every
        # start of the service (a third of it), and the native step (a CPU's default) never
        # compiles.
        import torch._inductor.config as inductor_config

        with (torch.inference_mode(),
              inductor_config.patch({"freezing": freezing, "cpp_wrapper": cpp_wrapper, **UNCHECKED,
                                     "cpp.min_chunk_size": SERIAL_KERNEL_ELEMENTS,
                                     "aot_inductor.custom_ops_to_c_shims": own_kernels.c_shims()})):
            positions = torch.full((count,), BLOCK_TOKENS + 1, device=self.device)
            token_ids = torch.full((count,), 3, device=self.device)
            if self.module.own_attention:
                call = self._call_rows
                inputs = (token_ids, positions, row_table([(keys, values, range(1, count + 1))]))
            else:  # as `group_view.gather` hands a step's rows over: a batch of their own
                call = self._call_gathered
                inputs = (token_ids, positions, keys[:, :count].contiguous(), values[:, :count].contiguous())
            self._compiling_for = inputs
            try:
                call(*inputs)
            finally:
                self._compiling_for = None
        return time.perf_counter() - started

    def _compile(self, graph_module: torch.fx.GraphModule, example_inputs: list):
        """torch.compile's backend: inductor's compile (what backend="inductor" calls, with no
        options), the compiled code kept to be called directly where the call was `warm`'s."""
        placeholders = [node.meta.get("example_value") for node in graph_module.graph.nodes if node.op == "placeholder"]
        from torch._inductor.compile_fx import compile_fx  # see `warm`

        arguments = list(example_inputs)
        compiled = compile_fx(graph_module, example_inputs)
        if self._compiling_for is not None:
            try:
                self.direct = GraphCall(compiled, arguments, placeholders, self._compiling_for)
            except LookupError as error:  # every step goes through torch.compile's frame
                logger.warning("the compiled decode step is called through torch.compile: %s", error)
        return compiled

    def takes(self, step: StepLayout, num_sampled: int) -> list[GroupDecode] | None:
        """The step's decodes when the graph can run it: no prompt, every token sampled."""
        if step.prompts or not step.decodes or num_sampled != step.num_tokens:
            return None
        return step.decodes

    def run(self, token_ids: torch.Tensor, step: StepLayout, greedy_only: bool = False) -> StepLogits | None:
        """The step's logits [tokens, vocab] with the cache written, or None (nothing done) when
        this step's shapes were not compiled. The graph computes every logit, `greedy_only` or not
        (the native step's call)."""
        if self.module.own_attention:
            return self._run_rows(token_ids, step.rows)
        return self._run_gathered(token_ids, step.decodes)

    def _run_rows(self, token_ids: torch.Tensor, rows: DecodeRows) -> StepLogits | None:
        """Our attention's way: the decoding rows alone, wherever they are, through the table."""
        outcome = self._outcome(self._call_rows, token_ids, rows.positions, rows.table)
        if outcome is None:
            return None
        logits, greedy, new_keys, new_values = outcome
        torch.ops.chatapp.store_rows(rows.table, rows.positions, new_keys, new_values)
        self.num_steps += 1
        return StepLogits(logits, greedy)

    def _run_gathered(self, token_ids: torch.Tensor, decodes: list[GroupDecode]) -> StepLogits | None:
        """Products and sums' way: the decoding rows' cached keys and values copied into a batch
        of their own, whichever cache groups hold them (group_view.gather), the step's own
        stored into each group after the call. Replayed from the graph captured for the step's
        bucket where there is one (captured_steps.py)."""
        positions = decodes[0].positions if len(decodes) == 1 else torch.cat([d.positions for d in decodes])
        outcome = None if self.captured is None else self.captured.run(token_ids, positions, decodes)
        if outcome is None:
            keys, values = group_view.gather(self.kv_cache, decodes)
            outcome = self._outcome(self._call_gathered, token_ids, positions, keys, values)
        if outcome is None:
            return None
        logits, greedy, new_keys, new_values = outcome
        first = 0
        for decode in decodes:
            tokens = slice(first, first + decode.count)
            self._store(decode, new_keys[:, tokens], new_values[:, tokens])
            first += decode.count
        self.num_steps += 1
        return StepLogits(logits, greedy)

    def _outcome(self, call, *inputs):
        """The graph's outputs for the step's tensors: its code called directly where it can be
        (graph_call.py), else `call` through torch.compile's frame; None where the step's shapes
        were not compiled."""
        outcome = None if self.direct is None else self.direct(*inputs)
        return outcome if outcome is not None else self._guarded(call, *inputs)

    def _guarded(self, call, *args):
        """The call's outcome, or None when its shapes were not compiled."""
        try:
            with torch.compiler.set_stance("fail_on_recompile"):
                return call(*args)
        except RuntimeError as error:
            if not str(error).startswith(RECOMPILE_REFUSED):
                raise
            if not self.num_fallbacks:  # once: which guard failed says which shape to compile too
                logger.warning("a decode step ran through the fused forward: %s", error)
            self.num_fallbacks += 1
            return None

    def _store(self, decode: GroupDecode, new_keys: torch.Tensor, new_values: torch.Tensor) -> None:
        """A group's decode tokens' keys and values [layers, count, kv_heads, dim] into its cache
        (products and sums' way; with our attention `store_rows` writes them through the table)."""
        keys, values = self.kv_cache.tensors(decode.group)
        # [rows, capacity, layers, kv_heads, dim]: (row, position) picks one token's every layer.
        at = (decode.rows, decode.positions)
        keys.permute(1, 3, 0, 2, 4).index_put_(at, new_keys.transpose(0, 1))
        values.permute(1, 3, 0, 2, 4).index_put_(at, new_values.transpose(0, 1))

    def _call_static(self, token_ids, positions, keys, values):
        """The graph over a bucket's static batch (captured_steps.py), or None where not compiled
        for it: what a captured graph replays."""
        return self._outcome(self._call_gathered, token_ids, positions, keys, values)

    def _call_rows(self, token_ids, positions, table):
        """The graph over rows found through decode_attention_rows' table."""
        from torch._dynamo.decorators import mark_unbacked  # see `warm`

        for tensor in (token_ids, positions, table):
            mark_unbacked(tensor, 0, shape_id="rows")
        return self.compiled(token_ids, positions, (table,))

    def _call_gathered(self, token_ids, positions, keys, values):
        """The graph over a batch of rows' cached keys and values, [layers, rows, kv_heads,
        length, dim] each, contiguous (group_view.gather)."""
        # The rows' count is unbacked: torch.compile would give a count of 1 a graph of its own
        # (a backed symbol is specialised at 0 and 1), so a lone stream's step had been padded to
        # four rows, and every padded row's attention computed over the whole context. Inductor
        # also sizes its loops by an unbacked symbol's fallback hint (8,192), not by the warm-up's
        # count, so the loops over rows (attention's above all) are shared between the threads.
        # In turns in one process (bf16, AVX-512 EPYC), against the graph padded to four rows
        # with a backed count, two runs: one stream 6-8% shorter over 100-token contexts and
        # 27-31% over 1,000, four streams 6-7% and 21-24% (BENCHMARKS.md).
        from torch._dynamo.decorators import mark_unbacked  # see `warm`

        for tensor, dim in ((token_ids, 0), (positions, 0), (keys, 1), (values, 1)):
            mark_unbacked(tensor, dim, shape_id="rows")
        return self.compiled(token_ids, positions, (keys, values))


def _copy(function: types.FunctionType) -> types.FunctionType:
    """The same function on a code object of its own."""
    return types.FunctionType(function.__code__.replace(), function.__globals__, function.__name__,
                              function.__defaults__, function.__closure__)
