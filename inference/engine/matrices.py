"""How the fused forward multiplies by its weight matrices: torch's own product, or oneDNN's.

A decode step multiplies a few rows by every weight matrix once, so it runs at the speed the
matrix library reads weights. Which library reads them fastest depends on the CPU, and by a
factor of two or more: on an AMD EPYC (AVX-512) oneDNN's packed matrices read 25-35 GB/s at
1-16 rows where torch's product (oneMKL) reads 6-20; on an Intel Xeon oneMKL was as fast or
faster for the layers' matrices at one row. So the choice is measured where the model loads
(`build`), on the model's own matrices, unless INFERENCE_MATRICES names one.

Either way the weights exist once: a packed model drops its plain matrices, and the modules'
layer weights go with them (the engine owns the model; its transformers forward is not used).
"""

import logging
import time
from enum import StrEnum

import torch

logger = logging.getLogger(__name__)

# Rows timed when choosing: one stream decoding, and a busy batch.
PROBE_ROWS = (1, 16)
# Rounds per layout and row count; the fastest counts (the first warms the code paths).
PROBE_ROUNDS = 2
# Row counts a packed matrix may pad a single row to (PackedMatrix.min_rows).
PADDED_ROWS = (1, 2, 4)
# Counts of rows a packed product is given in each doubling of the count above EXACT_ROWS
# (`packed_rows`): oneDNN keeps a kernel with its memory for every count it was given.
ROW_COUNTS_PER_DOUBLING = 8
EXACT_ROWS = 8


class MatrixLayout(StrEnum):
    AUTO = "auto"  # measure both where the model loads, keep the faster
    PLAIN = "plain"  # [in, out], multiplied as x @ w by torch (oneMKL on a CPU)
    PACKED = "packed"  # oneDNN's own layout for this CPU (CPU only, float32 and bfloat16)


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


def build(layout: MatrixLayout, weights: list[torch.Tensor]) -> tuple[MatrixLayout, list]:
    """The layout to multiply `weights` ([in, out], in forward order) in on this machine, and
    the matrices in it.

    AUTO times one pass through every matrix in each layout at each of PROBE_ROWS rows and
    keeps the one whose passes add up to less: the model's own matrices in their own order, so
    that the caches are as cold as in a real step.
    """
    if layout is MatrixLayout.PLAIN or not can_pack(weights[0]):
        return MatrixLayout.PLAIN, [PlainMatrix(weight) for weight in weights]
    packed = [PackedMatrix(weight) for weight in weights]
    if layout is MatrixLayout.PACKED:
        return layout, packed
    plain = [PlainMatrix(weight) for weight in weights]
    seconds = {MatrixLayout.PLAIN: 0.0, MatrixLayout.PACKED: 0.0}
    with torch.inference_mode():
        for count in PROBE_ROWS:
            inputs = {m.width: torch.randn(count, m.width, dtype=weights[0].dtype) for m in plain}
            for name, matrices in ((MatrixLayout.PLAIN, plain), (MatrixLayout.PACKED, packed)):
                seconds[name] += min(_pass(matrices, inputs) for _ in range(PROBE_ROUNDS))
    chosen = min(seconds, key=seconds.get)
    logger.info("matrices: plain %.1f ms, packed %.1f ms (a pass at each of %s rows): %s",
                seconds[MatrixLayout.PLAIN] * 1e3, seconds[MatrixLayout.PACKED] * 1e3,
                PROBE_ROWS, chosen)
    if chosen is MatrixLayout.PLAIN:
        return chosen, plain
    _pad_single_rows(packed)
    return chosen, packed


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
