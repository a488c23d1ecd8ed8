"""Decode steps replayed from CUDA graphs, one graph for each bucket of rows and cached length, as
vLLM replays its decode step.

On a GPU the compiled step (decode_graph.py) is a few hundred kernels, each launched from Python
by inductor's wrapper at a few microseconds apiece: more than the GPU's own work for a small
model's step (the default model's 270 MB of bf16 weights read at a few TB/s take well under a
millisecond). Replaying a captured graph launches them all in one call.

A graph replays its kernels on the very tensors it was captured with, so each bucket has static
inputs: the step's token ids and positions, and its rows' cached keys and values gathered into
one batch (group_view.gather_into) of the bucket's rows (a power of two at least the step's) and
length (a power of two of cache blocks at least what the step's longest row needs). The step's
rows take the first places; the places after them keep an earlier step's ids and positions,
valid ones, whose outputs are dropped (each row's arithmetic is its own). Every bucket's batch is
a view from the start of the same two flat buffers, so that each is contiguous, as the graph was
compiled for; the buffers grow to the largest bucket met (every graph captured again then, on
its bucket's next step), up to the cache's own token budget: a larger bucket is not captured
and its steps run the compiled step uncaptured, as before.

A bucket's graph is captured on its first step, after one call uncaptured (triton tunes a
kernel at its first launch, which a capture cannot hold), and every graph draws its working
memory from one pool: a replay's logits and greedy tokens are copied out before the step ends,
and its keys and values stored, so no graph's outputs are read after another's replay.

On a CPU there is no graph to capture: CaptureMode.CALLS runs the same buckets, static tensors
and copies, each replay calling the compiled step on them, so the GPU's path runs in the tests.
"""

import logging
from collections.abc import Callable
from enum import StrEnum
from typing import NamedTuple

import torch

from . import group_view
from .kv_cache import BLOCK_TOKENS

logger = logging.getLogger(__name__)


class CaptureMode(StrEnum):
    AUTO = "auto"  # CUDA graphs where the compiled step runs on a GPU, none elsewhere
    OFF = "off"  # the compiled step launched kernel by kernel
    CALLS = "calls"  # the buckets and static tensors without a graph: a CPU runs the GPU's path


class Bucket(NamedTuple):
    rows: int
    length: int  # cached keys a row may attend over, in whole blocks

    @classmethod
    def of(cls, rows: int, length: int) -> "Bucket":
        return cls(_power_of_two(rows), _power_of_two(-(-length // BLOCK_TOKENS)) * BLOCK_TOKENS)

    @property
    def tokens(self) -> int:
        return self.rows * self.length


# What a step's outputs are: logits [rows, vocab], greedy tokens [rows], the step's own keys and
# values [layers, rows, kv_heads, dim].
StepOutputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


class CapturedSteps:
    def __init__(self, call: Callable[..., StepOutputs | None], kv_cache, cuda_graphs: bool):
        """`call(token_ids, positions, keys, values)`: the compiled step's outputs for a gathered
        batch, or None where it refuses the tensors; `cuda_graphs`: capture and replay a CUDA
        graph for each bucket, else call `call` on the bucket's tensors (CaptureMode.CALLS)."""
        self.call = call
        self.kv_cache = kv_cache
        self.cuda_graphs = cuda_graphs
        shape = kv_cache.shape
        self.device = shape.device
        self._token_elements = shape.num_layers * shape.num_kv_heads * shape.head_dim
        self._flat: tuple[torch.Tensor, torch.Tensor] | None = None  # keys, values
        self._ids = torch.zeros(_power_of_two(kv_cache.max_rows), dtype=torch.long, device=self.device)
        self._positions = torch.zeros_like(self._ids)
        self._replays: dict[Bucket, Callable[[], StepOutputs]] = {}
        self._refused: set[Bucket] = set()  # buckets whose tensors the compiled step refused
        self._pool = None  # the graphs' memory pool, made at the first capture
        self.refused: str | None = None  # why capturing stopped: every step runs uncaptured
        self.num_captures = 0
        self.num_replays = 0

    @property
    def buckets(self) -> list[Bucket]:
        """The buckets captured, those the flat buffers' last growth kept."""
        return list(self._replays)

    def run(self, token_ids: torch.Tensor, positions: torch.Tensor, decodes) -> StepOutputs | None:
        """The step's outputs for these rows (the graph's groups' decodes), replayed; None where
        the step's bucket is larger than the cache's budget, the compiled step refused its
        tensors or capturing failed (the caller runs it uncaptured). The logits and greedy tokens are the caller's own; the keys and values
        are valid until the next step."""
        count = token_ids.shape[0]
        bucket = Bucket.of(count, group_view.length(self.kv_cache, decodes))
        if self.refused is not None or bucket.tokens > self.kv_cache.max_tokens or bucket in self._refused:
            return None
        inputs = self._inputs(bucket)
        ids, at, keys, values = inputs
        ids[:count] = token_ids
        at[:count] = positions
        group_view.gather_into(keys, values, self.kv_cache, decodes)
        replay = self._replays.get(bucket)
        captured = replay is None
        if captured:
            replay = self._capture(inputs)
        outputs = None if replay is None else replay()
        if outputs is None:  # the compiled step refused the bucket's tensors, as it will again
            self._refused.add(bucket)
            return None
        if captured:
            self._replays[bucket] = replay
            self.num_captures += 1
            logger.info("decode steps of up to %d streams and %d cached tokens: %s", bucket.rows, bucket.length,
                        "a CUDA graph captured" if self.cuda_graphs else "static tensors (no graph)")
        self.num_replays += 1
        logits, greedy, new_keys, new_values = outputs
        return logits[:count].clone(), greedy[:count].clone(), new_keys[:, :count], new_values[:, :count]

    def _inputs(self, bucket: Bucket) -> tuple[torch.Tensor, ...]:
        """The bucket's static tensors: ids, positions, keys and values [layers, rows, kv_heads,
        length, dim], views from the start of the flat buffers, grown first where too small."""
        shape = self.kv_cache.shape
        elements = bucket.tokens * self._token_elements
        if self._flat is None or self._flat[0].numel() < elements:
            # Every graph read the old buffers: each is captured again on its bucket's next step,
            # into a pool of its own: the graphs dropped here were the last users of theirs, which
            # torch's allocator then refuses to capture into (an internal assert, on the H100).
            self._replays.clear()
            self._pool = None
            self._flat = None
            keys = torch.zeros(elements, dtype=shape.dtype, device=self.device)
            self._flat = (keys, torch.zeros_like(keys))
        size = (shape.num_layers, bucket.rows, shape.num_kv_heads, bucket.length, shape.head_dim)
        keys, values = (flat[:elements].view(size) for flat in self._flat)
        return self._ids[: bucket.rows], self._positions[: bucket.rows], keys, values

    def _capture(self, inputs: tuple[torch.Tensor, ...]) -> Callable[[], StepOutputs | None] | None:
        """A replay of the step on a bucket's tensors; None where the capture failed (then no step
        is captured again: the log says why, once) or the compiled step refused the tensors."""
        if not self.cuda_graphs:
            return lambda: self.call(*inputs)
        try:
            return self._graph(inputs)
        except Exception as error:  # a capture that fails leaves the compiled step as it was
            logger.exception("decode steps not captured as CUDA graphs from now on")
            self.refused = f"{type(error).__name__}: {error}"
            return None

    def _graph(self, inputs: tuple[torch.Tensor, ...]) -> Callable[[], StepOutputs] | None:
        """A CUDA graph of the step on the bucket's tensors, and its replay."""
        current = torch.cuda.current_stream(self.device)
        side = torch.cuda.Stream(self.device)  # the warm-up off the capture's stream, as torch's docs do
        side.wait_stream(current)
        with torch.cuda.stream(side):
            warm = self.call(*inputs)  # triton's kernels tuned at their first launch, not in the capture
        current.wait_stream(side)
        if warm is None:
            return None
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        # thread_local: what another thread asks of CUDA meanwhile does not spoil the capture (the
        # service's other threads ask nothing of it; one that did would, under the default mode).
        with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
            outputs = self.call(*inputs)
        if outputs is None:
            return None

        def replay() -> StepOutputs:
            graph.replay()
            return outputs

        return replay


def _power_of_two(count: int) -> int:
    return 1 << max(0, count - 1).bit_length()
