"""How the fused forward multiplies by its weight matrices: torch's own product, oneDNN's, or ours.

A decode step multiplies a few rows by every weight matrix once, so it runs at the speed the
matrix library reads weights. Which library reads them fastest depends on the CPU, and by a
factor of two or more: on an AMD EPYC (AVX-512) oneDNN's packed matrices read 25-35 GB/s at
1-16 rows where torch's product (oneMKL) reads 6-20; on an Intel Xeon oneMKL was as fast or
faster for the layers' matrices at one row; on an AMD EPYC with AVX2 only, both read 13-17 GB/s
at one row where our own kernel (own_kernels.py) reads 21-23. So the choice is measured where
the model loads (`build`), on the model's own matrices, unless INFERENCE_MATRICES names one.

Either way the weights exist once: a packed model, or one in our kernel's [out, in], drops its
plain matrices, and the modules' layer weights go with them (the engine owns the model; its
transformers forward is not used).
"""

import logging
import math
import statistics
import time
from enum import StrEnum
from pathlib import Path

import torch

from . import own_kernels

logger = logging.getLogger(__name__)

# Rows timed when choosing: one stream decoding, and four. Not a busy batch's 16: on an AVX-512
# BF16 AMD EPYC our own kernel's pass at 16 rows took 1.3x oneDNN's, and the product at 1 and 16
# rows chose oneDNN at one start and ours at the next, yet served with ours at 16 and 64 streams
# the throughput was 130 and 153 tok/s against oneDNN's 132 and 138 (and one stream's token
# 18.8 against 21.6-23.0 ms): at those levels a step's time is mostly elsewhere (BENCHMARKS.md).
PROBE_ROWS = (1, 4)
# Passes per layout and row count, the layouts in turns; the median counts. The first passes
# after the weights are copied run slower (22-23 ms against 13-16 settled, F32, one row, an AMD
# EPYC), and a server's start has seen a layout's passes 10.2 then 15.3 ms a second apart.
PROBE_ROUNDS = 7
# Row counts a packed matrix may pad a single row to (PackedMatrix.min_rows).
PADDED_ROWS = (1, 2, 4)
# Rows at which our kernel's product is timed against torch's (at::linear on the same [out, in]
# weights) where ours serves, in this order, to find the most rows ours multiplies
# (`choose_dot_row_limit`): the fused forward's steps, decode rows beside prompt chunks of up to
# INFERENCE_PREFILL_CHUNK (512). Passes through every layer's matrices, as a step makes them: on
# an Intel Xeon with AMX (300 MB of L3) two layers' passes, whose weights stayed cached, put the
# float32 crossing at 32 rows, the whole model's at 48-64 (ours 81 / 105 ms at 48 / 64 rows,
# torch's 85 / 93); bfloat16 crossed at 16 (35 against 29 ms; at 64 rows 114 against 38, AMX).
LIMIT_ROWS = (8, 16, 32, 64, 128, 256, 512)
LIMIT_ROUNDS = 3
# Past this many rows a count is timed through a share of the matrices (the first, in forward
# order) with the arithmetic of this many rows through all of them: past it a product is bound by
# its arithmetic, not by reading weights, and whole-model passes cost seconds. Where ours is the
# faster at every count (float32, an AMD EPYC with AVX-512) the whole model's passes took 9.6 s
# at load, 6.6 of them at 256 and 512 rows; the shares took about 3 s and set 512 in two loads
# of three, 128 in the third (there ours and torch's were within 2-4%, the whole model's too).
LIMIT_WHOLE_ROWS = 64
# Counts of rows a packed product is given in each doubling of the count above EXACT_ROWS
# (`packed_rows`): oneDNN keeps a kernel with its memory for every count it was given.
ROW_COUNTS_PER_DOUBLING = 8
EXACT_ROWS = 8


class MatrixLayout(StrEnum):
    AUTO = "auto"  # time each that can run here where the model loads, keep the fastest
    PLAIN = "plain"  # [in, out], multiplied as x @ w by torch (oneMKL on a CPU)
    PACKED = "packed"  # oneDNN's own layout for this CPU (CPU only, float32 and bfloat16)
    DOT = "dot"  # [out, in], multiplied by our own kernel (AVX2: float32; AVX-512 BF16: bfloat16 too)


class PlainMatrix:
    def __init__(self, weight: torch.Tensor):
        self.weight = weight  # [in, out]
        self.width = weight.shape[0]

    def __call__(self, rows: torch.Tensor) -> torch.Tensor:
        return rows @ self.weight


class PackedMatrix:
    def __init__(self, weight: torch.Tensor):
        self.width = weight.shape[0]
        # oneDNN takes [out, in]; None: a layout for any number of rows.
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.t().contiguous(), None)
        # Fewer rows than this are padded with zero rows: on some CPUs oneDNN's kernel for one
        # row reads the matrix slower than its kernel for a few (4.1 against 3.2 ms for the
        # output matrix on an AMD EPYC). `build` measures it.
        self.min_rows = 1

    def __call__(self, rows: torch.Tensor) -> torch.Tensor:
        count = rows.shape[0]
        if count < self.min_rows:
            rows = torch.cat((rows, rows.new_zeros(self.min_rows - count, self.width)))
        product = torch.ops.mkldnn._linear_pointwise(rows, self.packed, None, "none", [], "")
        return product[:count] if count < self.min_rows else product


class DotMatrix:
    def __init__(self, weight: torch.Tensor):
        # [out, in]: each output's weights contiguous, the order the kernel streams them in.
        self.weight = weight
        self.width = weight.shape[1]

    def __call__(self, rows: torch.Tensor) -> torch.Tensor:
        return torch.ops.chatapp.dot_rows(rows, self.weight)


def choose_dot_row_limit(matrices: list[DotMatrix], kept: int | None = None) -> int:
    """Times our product against torch's through `matrices` (the layers', in forward order; past
    LIMIT_WHOLE_ROWS a share of them) at each of LIMIT_ROWS in turn, ours and torch's alternating,
    until torch's is the faster, and sets the most rows ours multiplies at their precision
    (dot_rows.cpp) to the last count before; the limit. Once per process for a model's matrices,
    and not at all where an earlier start's limit is `kept` (matrix_choice.py)."""
    dtype = matrices[0].weight.dtype
    shapes = (dtype, tuple(tuple(m.weight.shape) for m in matrices))
    if kept is not None:
        _measured_limits[shapes] = kept
    if shapes in _measured_limits:  # a model loaded again in this process
        return torch.ops.chatapp.dot_rows_limit(dtype, _measured_limits[shapes])
    # torch's product of the same [out, in] weights, what dot_rows hands over to (at::linear
    # without a bias multiplies by the weight's transpose, as PlainMatrix does).
    torch_products = [PlainMatrix(matrix.weight.t()) for matrix in matrices]
    torch.ops.chatapp.dot_rows_limit(dtype, LIMIT_ROWS[-1])  # ours multiplies every count timed
    limit, timed = 1, []
    with torch.inference_mode():
        for count in LIMIT_ROWS:
            share = max(1, min(len(matrices), len(matrices) * LIMIT_WHOLE_ROWS // count))
            timed_ours, timed_theirs = matrices[:share], torch_products[:share]
            inputs = {m.width: torch.randn(count, m.width, dtype=dtype) for m in timed_ours}
            passes: dict[bool, list[float]] = {True: [], False: []}
            for turn in range(LIMIT_ROUNDS):
                for is_ours in (turn % 2 == 0, turn % 2 == 1):
                    passes[is_ours].append(_pass(timed_ours if is_ours else timed_theirs, inputs))
            ours, theirs = statistics.median(passes[True]), statistics.median(passes[False])
            through = f" through {share} of {len(matrices)} matrices" if share < len(matrices) else ""
            timed.append(f"{count} rows {ours * 1e3:.1f} / {theirs * 1e3:.1f}{through}")
            if ours > theirs:
                break
            limit = count
    _measured_limits[shapes] = limit
    torch.ops.chatapp.dot_rows_limit(dtype, limit)
    logger.info("products of more than %d rows go to torch's (%s; a pass, ours / torch's: %s ms)",
                limit, str(dtype).removeprefix("torch."), ", ".join(timed))
    return limit


_measured_limits: dict[tuple, int] = {}


def dot_matrices(weights: list[torch.Tensor]) -> list[DotMatrix]:
    """The [in, out] weights as DotMatrix, transposed into one allocation in their order.

    One allocation, not one per matrix: glibc's malloc advises 2 MB pages for the memory it maps
    (huge_pages.py), but a matrix of a few MB may come from its heap once its mapping threshold has
    grown; allocated one by one, the served default model had 252 of its 538 MB in 2 MB pages.
    """
    buffer = weights[0].new_empty(sum(weight.numel() for weight in weights))
    matrices, first = [], 0
    for weight in weights:
        inside = buffer[first : first + weight.numel()].view(weight.shape[1], weight.shape[0])
        matrices.append(DotMatrix(inside.copy_(weight.t())))
        first += weight.numel()
    return matrices


def packed_rows(count: int) -> int:
    """The rows a step of `count` gives its packed products: `count` up to EXACT_ROWS, above it
    the next of ROW_COUNTS_PER_DOUBLING evenly spaced counts in its doubling (at most 12.5% more).

    oneDNN (and ideep's cache before it) keeps the kernel it built for each count of rows and
    matrix shape, with its memory. Served at 64 streams, where prompt chunks of every size join
    the decodes, the default model's heap in use grew by 270 MB that stayed (fp32, a Xeon); with
    the counts bounded here, by 167 MB, and by 50 MB with both caches cut to 16 kernels
    (BENCHMARKS.md). Bounded counts also bound the kernels built while serving: 5-7 ms for each
    new count, for the model's five shapes.
    """
    if count <= EXACT_ROWS:
        return count
    spacing = (1 << (count - 1).bit_length()) // (2 * ROW_COUNTS_PER_DOUBLING)
    return -(-count // spacing) * spacing


def can_pack(weight: torch.Tensor) -> bool:
    return (weight.device.type == "cpu" and weight.dtype in (torch.float32, torch.bfloat16)
            and torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
            # oneDNN packs bfloat16 only with AVX-512 (BW, VL, DQ) or AVX-NE-CONVERT: on an
            # AVX2-only CPU packing raised and a bfloat16 model failed to load.
            and (weight.dtype != torch.bfloat16 or torch.ops.mkldnn._is_mkldnn_bf16_supported()))


def can_dot(weight: torch.Tensor, cache_dir: Path | None = None) -> bool:
    """Whether our own kernel multiplies by `weight` here (building it the first time)."""
    return weight.device.type == "cpu" and weight.dtype in own_kernels.dtypes(cache_dir)


def build(layout: MatrixLayout, weights: list[torch.Tensor],
          cache_dir: Path | None = None) -> tuple[MatrixLayout, list, str]:
    """The layout to multiply `weights` ([in, out], in forward order) in on this machine, the
    matrices in it, and what AUTO timed ("" where nothing was). A layout this machine cannot
    multiply in falls back to PLAIN.

    AUTO times passes through every matrix in each layout at each of PROBE_ROWS rows, the
    model's own matrices in their own order, so that the caches are as cold as in a real step,
    and keeps the one whose passes' product is the least: each count of rows weighs alike,
    relative to its own time (a sum let the longer pass decide alone, and our own kernel's lead
    at one row, 25%, lost to noise in the other). Every layout is built before any is timed, and
    they are timed in turns (`_probe`): timed one after the other, a layout met the machine in
    another phase than the next one's. The plain weights are the caller's, so at most three
    copies exist at once, as when each was dropped unless it was the fastest so far.
    """
    makers = {MatrixLayout.PLAIN: lambda: [PlainMatrix(weight) for weight in weights]}
    if can_pack(weights[0]):
        makers[MatrixLayout.PACKED] = lambda: [PackedMatrix(weight) for weight in weights]
    if layout in (MatrixLayout.AUTO, MatrixLayout.DOT) and can_dot(weights[0], cache_dir):
        makers[MatrixLayout.DOT] = lambda: dot_matrices(weights)
    if layout is not MatrixLayout.AUTO or len(makers) == 1:
        chosen = layout if layout in makers else MatrixLayout.PLAIN
        if chosen is not layout and layout is not MatrixLayout.AUTO:
            logger.warning("matrices: %s cannot multiply %s weights here; plain instead", layout,
                           str(weights[0].dtype).removeprefix("torch."))
        return chosen, makers[chosen](), ""
    layouts = {name: make() for name, make in makers.items()}
    seconds = _probe(layouts, weights[0].dtype)
    chosen = min(seconds, key=lambda name: math.prod(seconds[name]))
    matrices = layouts.pop(chosen)
    del layouts  # the others' copies of the weights
    timed = (f"a pass at {' / '.join(map(str, PROBE_ROWS))} rows (median): "
             + ", ".join(f"{name} " + " / ".join(f"{value * 1e3:.1f}" for value in values)
                         for name, values in seconds.items()) + " ms")
    logger.info("matrices: %s: %s", timed, chosen)
    if chosen is MatrixLayout.PACKED:
        _pad_single_rows(matrices)
    return chosen, matrices, timed


def _probe(layouts: dict[MatrixLayout, list], dtype: torch.dtype) -> dict[MatrixLayout, list[float]]:
    """Each layout's median seconds of PROBE_ROUNDS passes at each of PROBE_ROWS. The layouts
    take turns, each round in another order, so that a machine whose speed moves meanwhile
    moves every layout's passes alike."""
    names = list(layouts)
    seconds: dict[MatrixLayout, list[float]] = {name: [] for name in names}
    with torch.inference_mode():
        for count in PROBE_ROWS:
            inputs = {m.width: torch.randn(count, m.width, dtype=dtype) for m in layouts[names[0]]}
            passes: dict[MatrixLayout, list[float]] = {name: [] for name in names}
            for turn in range(PROBE_ROUNDS):
                first = turn % len(names)
                for name in names[first:] + names[:first]:
                    passes[name].append(_pass(layouts[name], inputs))
            for name in names:
                seconds[name].append(statistics.median(passes[name]))
    return seconds


def _pad_single_rows(packed: list["PackedMatrix"]) -> None:
    """Sets every matrix's min_rows to the padding under which one row's pass is fastest."""
    inputs = {m.width: torch.randn(1, m.width, dtype=m.packed.dtype) for m in packed}
    seconds = {}
    with torch.inference_mode():
        for rows in PADDED_ROWS:
            for matrix in packed:
                matrix.min_rows = rows
            seconds[rows] = min(_pass(packed, inputs) for _ in range(PROBE_ROUNDS))
    best = min(seconds, key=seconds.get)
    for matrix in packed:
        matrix.min_rows = best
    logger.info("packed matrices: one row padded to %d (a pass: %s ms)", best,
                ", ".join(f"{rows} rows {value * 1e3:.1f}" for rows, value in seconds.items()))


def _pass(matrices: list, inputs: dict[int, torch.Tensor]) -> float:
    """Seconds to multiply every matrix by rows of its input width."""
    started = time.perf_counter()
    for matrix in matrices:
        matrix(inputs[matrix.width])
    return time.perf_counter() - started


def tensor_of(matrix) -> torch.Tensor:
    """The tensor a matrix object (matrices.py) multiplies by."""
    return matrix.packed if isinstance(matrix, PackedMatrix) else matrix.weight
