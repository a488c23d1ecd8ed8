"""Runs one forward pass for a whole step: every scheduled token of every sequence, packed.

All new tokens of a step travel as one row with their own positions, so the linear layers see
one matrix however the step mixes prompt chunks and decode tokens. Attention is ours (see
attention.py): each token's keys and values go into its sequence's cache row, then decode
tokens attend per cache group and prompt chunks per sequence. A plain Llama runs through the
fused forward (fused_llama.py); any other transformers causal LM whose attention goes through
transformers' attention interface (Mistral, Qwen, Gemma, ...) runs its own forward unchanged.
"""

import logging
import threading
import time
from pathlib import Path

import torch

from . import fused_llama, heap, own_kernels
from .attention import ATTENTION_NAME, DecodeRows, GroupDecode, PromptChunk, StepLayout
from .captured_steps import CaptureMode
from .decode_graph import CompileMode, DecodeGraph, compiler_missing
from .door import GraphState
from .kv_cache import KVCache
from .matrices import MatrixLayout
from .native_step import NativeStep
from .native_step import why_not as native_why_not
from .row_table import row_table
from .sampler import StepLogits
from .scheduler import ScheduledChunk
from .step_trial import StepKind, StepPath, StepTrial, StepTrials


logger = logging.getLogger(__name__)


class ModelRunner:
    def __init__(self, model, kv_cache: KVCache, matrices: MatrixLayout = MatrixLayout.AUTO,
                 compile_mode: CompileMode = CompileMode.OFF, cache_dir: Path | None = None,
                 native_step: bool = True, capture: CaptureMode = CaptureMode.AUTO):
        self.model = model
        self.capture = capture
        self.kv_cache = kv_cache
        # Decode tokens attend through our own kernel where it takes the cache's heads (a CPU,
        # float32 or bfloat16), else through torch's attention (attention.py).
        shape = kv_cache.shape
        self.own_attention = own_kernels.attends(shape.device, shape.dtype, shape.head_dim, cache_dir)
        self.device = next(model.parameters()).device
        model.set_attn_implementation(ATTENTION_NAME)
        self.fused = fused_llama.FusedLlama(model, matrices, cache_dir) if fused_llama.supports(model) else None
        # The decode step: our own C++ step where it runs (native_step.py), else the decode graph
        # once it compiled; until then (or without either) the fused forward serves every step.
        # Under AUTO the trials time both ways for each kind of step (step_trial.py), and each
        # kind goes the way that was faster.
        self.graph: DecodeGraph | NativeStep | None = self._native_step(compile_mode, native_step)
        self.trials: StepTrials | None = None
        self.compiling: threading.Thread | None = None
        if self.graph is not None:
            self.trials = StepTrials() if compile_mode is CompileMode.AUTO else None
            return
        compiling = self._can_compile(model, compile_mode)
        if compiling and compile_mode is CompileMode.ON:
            self.graph = self._compiled_graph(compile_mode, cache_dir)
        elif compiling:
            # A minute or more (a 2-core CPU; 54-73 s on the lent H100): the service is ready at
            # once, and the graph takes over the steps it runs once it compiled.
            self.compiling = threading.Thread(target=self._compile_in_background, args=(cache_dir,),
                                              name="decode-graph-compile", daemon=True)
            self.compiling.start()

    def _native_step(self, mode: CompileMode, asked: bool) -> NativeStep | None:
        """Our own C++ decode step where it is asked for and runs here, else None."""
        if mode is CompileMode.OFF or not asked:
            return None
        why = native_why_not(self.fused, self.own_attention)
        if why is not None:
            logger.info("decode steps not native: %s", why)
            return None
        logger.info("decode steps run natively (kernels/decode_step.cpp)")
        return NativeStep(self.fused)

    def _compiled_graph(self, mode: CompileMode, cache_dir: Path | None) -> DecodeGraph | None:
        """The decode graph, compiled; under AUTO a compile that fails leaves the fused forward."""
        try:
            graph = DecodeGraph(self.fused, self.kv_cache, self.own_attention, cache_dir, self.capture)
            logger.info("decode step compiled in %.0f s", graph.warm())
            heap.trim()  # the compiler's working memory, freed, goes back to the system
            return graph
        except Exception:
            if mode is CompileMode.ON:
                raise
            logger.exception("the decode step did not compile; the fused forward serves every step")
            return None

    def _compile_in_background(self, cache_dir: Path | None) -> None:
        graph = self._compiled_graph(CompileMode.AUTO, cache_dir)
        self.trials = StepTrials() if graph is not None else None
        # One assignment, seen whole by the step thread (the trials set before it): the graph
        # takes part from the next decode step.
        self.graph = graph

    @property
    def graph_state(self) -> GraphState:
        if self.graph is not None:
            return GraphState.COMPILED
        if self.compiling is not None and self.compiling.is_alive():
            return GraphState.COMPILING
        return GraphState.UNCOMPILED

    def step_counts(self) -> dict[str, int]:
        """Decode steps run as one step so far (num_compiled_steps), and of those replayed from a
        captured graph (num_replayed_steps)."""
        graph = self.graph
        captured = None if graph is None else graph.captured
        return {"num_compiled_steps": 0 if graph is None else graph.num_steps,
                "num_replayed_steps": 0 if captured is None else captured.num_replays}

    def _can_compile(self, model, mode: CompileMode) -> bool:
        """Whether the decode step is compiled (decode_graph.py); ON refuses what AUTO skips."""
        if mode is CompileMode.OFF:
            return False
        why_not = compiler_missing(self.device)
        if why_not is None and not fused_llama.supports(model):
            why_not = f"{type(model).__name__} is not a plain Llama (only the fused forward compiles)"
        if why_not is None and not fused_llama.has_static_rotary(model):
            why_not = "its rotary embedding depends on the sequence's length"
        if mode is CompileMode.ON and why_not is not None:
            raise RuntimeError(f"INFERENCE_COMPILE=on, but the decode step cannot compile: {why_not}")
        if why_not is None:
            return True
        logger.info("decode step not compiled: %s", why_not)
        return False

    @torch.inference_mode()
    def run(self, chunks: list[ScheduledChunk], greedy_only: bool = False) -> StepLogits:
        """Feeds every chunk; returns logits [number of sampling chunks, vocab], in chunk order
        (with each row's greedy token where the compiled step ran). `greedy_only`: the caller
        takes every sampling chunk's greedy token, so that a step that finds them without the
        logits may return none (native_step.py)."""
        token_ids: list[int] = []
        positions: list[int] = []
        sampled_at: list[int] = []
        for chunk in chunks:
            token_ids.extend(chunk.token_ids)
            positions.extend(range(chunk.start, chunk.end))
            if chunk.samples:
                sampled_at.append(len(token_ids) - 1)
        layout = self._layout(chunks, len(token_ids))
        # One tensor, so that a GPU gets one copy from the host per step rather than three.
        packed = torch.tensor(token_ids + positions + sampled_at, device=self.device, dtype=torch.long)
        inputs, at, keep = packed.split((len(token_ids), len(positions), len(sampled_at)))
        scores = self._forward(inputs, at, keep, layout, len(sampled_at), greedy_only)
        for chunk in chunks:
            chunk.sequence.num_cached_tokens = chunk.end
        return scores

    def _forward(self, inputs, at, keep, layout: StepLayout, num_sampled: int, greedy_only: bool) -> StepLogits:
        """The step's logits: through the compiled graph where it runs this step (and, while the
        trial of this kind of step lasts, every other such step through the fused forward, each
        timed; after it, the way it found faster), else uncompiled."""
        graph, trials = self.graph, self.trials
        decodes = None if graph is None else graph.takes(layout, num_sampled)
        if decodes is None:
            return self._uncompiled(inputs, at, keep, layout)
        kind = StepKind.of(decodes) if trials is not None else None
        trial = trials.of(kind) if kind is not None else None
        path = trial.next_path() if trial is not None else StepPath.GRAPH
        timing = trial is not None and trial.winner is None
        started = self._finished_at() if timing else 0.0
        scores = graph.run(inputs, layout, greedy_only) if path is StepPath.GRAPH else None
        if scores is None:
            scores = self._uncompiled(inputs, at, keep, layout)
            if path is StepPath.GRAPH:  # shapes the graph was not compiled for: counts for neither way
                return scores
        if timing:
            self._record(trial, kind, path, self._finished_at() - started)
        return scores

    def _uncompiled(self, inputs, at, keep, layout: StepLayout) -> StepLogits:
        if self.fused is not None:
            return StepLogits(self.fused(inputs, at, keep, layout))
        return StepLogits(self.model(input_ids=inputs[None], position_ids=at[None], use_cache=False,
                                     logits_to_keep=keep, inference_step=layout).logits[0])

    def _finished_at(self) -> float:
        """The time once the device finished what it was given."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    @staticmethod
    def _record(trial: StepTrial, kind: StepKind, path: StepPath, seconds: float) -> None:
        if not trial.record(path, seconds):
            return
        medians = trial.medians()
        logger.info("decode steps of %d streams, context up to %d tokens, timed "
                    "%d times each way: compiled %.1f ms, fused forward %.1f ms (medians): the %s "
                    "serves them", kind.rows, kind.context, trial.samples,
                    medians[StepPath.GRAPH] * 1e3, medians[StepPath.FUSED] * 1e3,
                    "compiled step" if trial.winner is StepPath.GRAPH else "fused forward")

    def _layout(self, chunks: list[ScheduledChunk], num_tokens: int) -> StepLayout:
        layout = StepLayout(self.kv_cache, num_tokens)
        decodes: dict[int, list[tuple[int, int, int]]] = {}  # group -> (token, row, length)
        first = 0
        for chunk in chunks:
            slot = chunk.sequence.slot
            count = len(chunk.token_ids)
            if not chunk.sequence.is_prefilling:
                decodes.setdefault(slot.group, []).append((first, slot.row, chunk.end))
            else:
                layout.prompts.append(PromptChunk(
                    slot.group, slot.row, first, count, chunk.end,
                    None if chunk.start == 0 else self._chunk_mask(chunk.start, count),
                ))
            first += count
        for group, entries in decodes.items():
            layout.decodes.append(self._decode(group, entries))
        if self.own_attention and layout.decodes:
            layout.rows = self._decode_rows(decodes)
        return layout

    def _decode_rows(self, decodes: dict[int, list[tuple[int, int, int]]]) -> DecodeRows:
        """The table our attention finds every decode token's row through; the scheduler put
        the decode tokens first."""
        entries = [entry for group in decodes.values() for entry in group]
        if [token for token, _, _ in entries] != list(range(len(entries))):
            raise RuntimeError("decode chunks must come first in the step")
        table = row_table([(*self.kv_cache.tensors(group), [row for _, row, _ in group_entries])
                           for group, group_entries in decodes.items()])
        positions = torch.tensor([end - 1 for _, _, end in entries], device=self.device)
        return DecodeRows(table, positions, len(entries))

    def _decode(self, group: int, entries: list[tuple[int, int, int]]) -> GroupDecode:
        """Decode tokens of one group; the scheduler put them side by side, in row order."""
        tokens, rows, lengths = zip(*entries)
        if list(tokens) != list(range(tokens[0], tokens[0] + len(tokens))) or list(rows) != sorted(set(rows)):
            raise RuntimeError("decode chunks must come grouped and in cache-row order")
        first_row, span = rows[0], rows[-1] - rows[0] + 1
        length = max(lengths)
        if self.own_attention:
            # Our attention reads each row through the step's table (`_decode_rows`): no mask,
            # rows, positions or offsets to build, each a host-to-tensor copy a group and step.
            return GroupDecode(group, tokens[0], len(tokens), None, None, first_row, span, None, length, None)
        offsets = None
        if span != len(rows):
            offsets = torch.tensor([row - first_row for row in rows], device=self.device)
        mask = None
        if span != len(rows) or min(lengths) != length:
            limits = torch.ones(span, dtype=torch.long)  # rows not decoding see one key: no NaN
            limits[[row - first_row for row in rows]] = torch.tensor(lengths)
            mask = self._additive(torch.arange(length)[None, :] < limits[:, None]).view(span, 1, 1, length)
        rows_and_positions = torch.tensor([rows, [end - 1 for end in lengths]], device=self.device)
        return GroupDecode(group, tokens[0], len(tokens), rows_and_positions[0], rows_and_positions[1],
                           first_row, span, offsets, length, mask)

    def _chunk_mask(self, start: int, count: int) -> torch.Tensor:
        """Chunk token i (at position start + i) sees every key up to and including its own."""
        keys = torch.arange(start + count)[None, :]
        queries = torch.arange(start, start + count)[:, None]
        return self._additive(keys <= queries)

    def _additive(self, visible: torch.Tensor) -> torch.Tensor:
        """A mask attention adds to its scores, built once per step rather than once per layer."""
        dtype = self.kv_cache.shape.dtype
        mask = torch.zeros(visible.shape, dtype=dtype).masked_fill_(~visible, float("-inf"))
        return mask.to(self.device)
