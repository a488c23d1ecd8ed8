"""The engine: requests in, one batched forward pass per `step()`, text deltas out.

A request that makes its step fail ends alone: the step's sequences are retried one at a time,
those that fail alone end with an error and free their cache, the rest go on. Retrying is safe
because a pass changes nothing until it returns (keys and values it wrote sit at the chunk's
own positions, which a retry writes again; a sequence's cached count moves only on success).
Only when no sequence can step at all does `step()` raise.
"""

import copy
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import jinja2

from common.vocabulary import FinishReason

from .captured_steps import CaptureMode
from .decode_graph import CompileMode
from .detokenizer import IncrementalDetokenizer
from .door import EngineLimits, EngineStats, GraphState, PromptRefused
from .kv_cache import CacheShape, KVCache
from .matrices import MatrixLayout
from .model_runner import ModelRunner
from .sampler import StepLogits, sample
from .scheduler import ScheduledChunk, Scheduler
from .sequence import SamplingParams, Sequence
from .step_cost import StepCost, StepMix

logger = logging.getLogger(__name__)

# Sequences that may fail alone, one after another with no pass succeeding between them, before
# the engine itself counts as broken: one bad request cannot tell a bad runner from itself,
# several in a row can.
MAX_FAILURES_IN_A_ROW = 3


@dataclass(frozen=True)
class RequestOutput:
    request_id: str
    token_id: int | None  # the token this step added; None when the request failed
    text: str  # new text since this request's previous output; may be empty
    num_prompt_tokens: int
    num_output_tokens: int
    finish_reason: FinishReason | None = None
    # Prompt tokens whose keys and values came from a shared prefix instead of being fed.
    num_reused_tokens: int = 0
    # Seconds between arrival and admission into the batch; on a request's first output only.
    queue_wait_s: float | None = None
    error: str | None = None  # why the request ended alone, with finish_reason ERROR

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass(frozen=True)
class EngineConfig:
    """What an engine is built with; `LLMEngine.limits()` says what it then accepts."""

    max_running: int
    max_cached_tokens: int
    max_model_len: int | None  # None: the model's own (max_position_embeddings)
    prefill_chunk: int
    prefill_chunk_idle: int
    cache_group_size: int
    prefill_chunk_min: int = 16
    reuse_prefixes: bool = True
    prefill_stretch: float = 2.0
    # Decoding streams from which on prefill_stretch holds; with fewer it grows (scheduler.py).
    prefill_stretch_streams: int = 1
    # Tokens kept rows may hold between them (None: up to the cache budget).
    max_kept_tokens: int | None = None
    # How the fused forward multiplies by its weights (matrices.py): measured at load by default.
    matrices: MatrixLayout = MatrixLayout.AUTO
    # Whether decode steps run as one compiled graph (decode_graph.py); and where inductor keeps
    # what it compiled (None: its own default, a temporary directory).
    compile_mode: CompileMode = CompileMode.OFF
    # Where compile_mode is not OFF, whether our own C++ step (native_step.py) serves the decode
    # steps where it can run, in the compiled graph's place.
    native_step: bool = True
    # Whether the compiled step's decode steps replay CUDA graphs captured per bucket of rows and
    # context (captured_steps.py): by default on a GPU.
    capture: CaptureMode = CaptureMode.AUTO
    cache_dir: Path | None = None


class LLMEngine:
    def __init__(self, model, tokenizer, engine_config: EngineConfig):
        self.tokenizer = tokenizer
        # Prompts are encoded on other threads than the step loop's decoding, several at once: a
        # fast tokenizer must not be used by two threads at once ("Already borrowed"), and a lock
        # would make every prompt wait for the longest being encoded. Each thread encodes with a
        # copy of its own of this one (_thread_tokenizer).
        self.prompt_tokenizer = copy.deepcopy(tokenizer)
        self._thread_tokenizers = threading.local()
        config = model.config
        shape = CacheShape(
            num_layers=config.num_hidden_layers,
            num_kv_heads=getattr(config, "num_key_value_heads", None) or config.num_attention_heads,
            head_dim=getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads,
            dtype=next(model.parameters()).dtype,
            device=next(model.parameters()).device,
        )
        c = engine_config
        self.kv_cache = KVCache(shape, c.max_cached_tokens, c.max_running, c.cache_group_size)
        self.step_cost = StepCost()
        self.scheduler = Scheduler(self.kv_cache, c.max_running, c.prefill_chunk, c.prefill_chunk_idle,
                                   c.prefill_chunk_min, c.reuse_prefixes, self.step_cost,
                                   c.prefill_stretch, c.max_kept_tokens, c.prefill_stretch_streams)
        self.runner = ModelRunner(model, self.kv_cache, c.matrices, c.compile_mode, c.cache_dir, c.native_step,
                                  c.capture)
        longest = [self.kv_cache.max_sequence_tokens, c.max_model_len,
                   getattr(config, "max_position_embeddings", None)]
        self._limits = EngineLimits(max_model_len=min(n for n in longest if n is not None),
                                    max_num_seqs=c.max_running, max_cached_tokens=c.max_cached_tokens)
        self.eos_token_ids = end_of_turn_ids(model, tokenizer)
        self.num_steps = 0
        self.num_failures_in_a_row = 0

    # --- requests ---
    def add_request(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams) -> None:
        self._limits.answer_room(len(prompt_token_ids), params.max_tokens)
        detokenizer = IncrementalDetokenizer(self.decode, params.stop)
        self.scheduler.add(Sequence(request_id, prompt_token_ids, params, detokenizer))

    def abort_request(self, request_id: str) -> bool:
        """Drops the request and frees its cache at once; False when it was not here."""
        return self.scheduler.abort(request_id) is not None

    def abort_all(self) -> list[str]:
        return [sequence.request_id for sequence in self.scheduler.abort_all()]

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    # --- the step ---
    def step(self) -> list[RequestOutput]:
        chunks = self.scheduler.schedule()
        if not chunks:
            return []
        self.num_steps += 1
        mix = StepMix.PROMPT if any(chunk.sequence.is_prefilling for chunk in chunks) else StepMix.DECODE
        started = time.perf_counter()
        if len(chunks) == 1:
            outputs = self._run_alone(chunks[0])
        else:
            try:
                scores = self.runner.run(chunks, greedy_only=_greedy_only(chunks))
            except Exception:
                # Said every time: a failure only a full batch meets would otherwise turn every
                # step into one pass per sequence, silently. Not timed: a pass per sequence.
                logger.exception("a step of %d sequences failed; retrying them one at a time", len(chunks))
                return [output for chunk in chunks for output in self._run_alone(chunk)]
            self.num_failures_in_a_row = 0
            outputs = self._sample(chunks, scores)  # waits for the device: the step is done
        # A lone stream's steps too: most of a chat server's life, and all the spread of prompt
        # sizes there is before streams meet (fed whole while nothing decodes).
        if not any(output.error for output in outputs):
            self.step_cost.observe(mix, sum(len(chunk.token_ids) for chunk in chunks),
                                   time.perf_counter() - started)
        return outputs

    def _run_alone(self, chunk: ScheduledChunk) -> list[RequestOutput]:
        try:
            scores = self.runner.run([chunk], greedy_only=_greedy_only([chunk]))
        except Exception as error:
            self.num_failures_in_a_row += 1
            if self.num_failures_in_a_row >= MAX_FAILURES_IN_A_ROW:
                raise
            return [self._fail(chunk.sequence, error)]
        self.num_failures_in_a_row = 0
        return self._sample([chunk], scores)

    def _sample(self, chunks: list[ScheduledChunk], scores: StepLogits) -> list[RequestOutput]:
        sampling = [chunk.sequence for chunk in chunks if chunk.samples]
        try:
            token_ids = sample(scores.logits, sampling, scores.greedy)
        except Exception:
            token_ids = None  # someone's draw failed: draw again one by one to find whose
        outputs = []
        for index, sequence in enumerate(sampling):
            try:
                if token_ids is None:
                    row = scores.row(index)
                    token_id = sample(row.logits, [sequence], row.greedy)[0]
                else:
                    token_id = token_ids[index]
                outputs.append(self._append(sequence, token_id))
            except Exception as error:
                outputs.append(self._fail(sequence, error))
                continue
            if sequence.is_finished:
                self.scheduler.finish(sequence)
        return outputs

    def _fail(self, sequence: Sequence, error: Exception) -> RequestOutput:
        """Ends one sequence with an error and frees its cache; the batch goes on without it."""
        logger.error("request %s failed alone and ends: %r", sequence.request_id, error)
        sequence.finish(FinishReason.ERROR)
        self.scheduler.finish(sequence)
        return RequestOutput(
            request_id=sequence.request_id, token_id=None, text="",
            num_prompt_tokens=sequence.num_prompt_tokens,
            num_output_tokens=sequence.num_output_tokens, num_reused_tokens=sequence.num_reused_tokens,
            finish_reason=FinishReason.ERROR, error=f"{type(error).__name__}: {error}",
        )

    def _append(self, sequence: Sequence, token_id: int) -> RequestOutput:
        sequence.output_token_ids.append(token_id)
        if token_id in self.eos_token_ids:
            # The end-of-turn token ends the answer; it is counted but never shown.
            text = sequence.detokenizer.finish(sequence.output_token_ids[:-1])
            sequence.finish(FinishReason.STOP)
        else:
            text = sequence.detokenizer.add(sequence.output_token_ids)
            if sequence.detokenizer.stopped:
                sequence.finish(FinishReason.STOP)
            elif (sequence.num_output_tokens >= sequence.params.max_tokens
                  or sequence.num_tokens >= self._limits.max_model_len):
                text += sequence.detokenizer.finish(sequence.output_token_ids)
                # The text held for a half character, released now, may complete a stop string.
                sequence.finish(FinishReason.STOP if sequence.detokenizer.stopped else FinishReason.LENGTH)
        return RequestOutput(
            request_id=sequence.request_id,
            token_id=token_id,
            text=text,
            num_prompt_tokens=sequence.num_prompt_tokens,
            num_output_tokens=sequence.num_output_tokens,
            num_reused_tokens=sequence.num_reused_tokens,
            finish_reason=sequence.finish_reason,
            queue_wait_s=(sequence.admitted_at - sequence.arrived_at)
            if sequence.num_output_tokens == 1 else None,
        )

    # --- text ---
    def decode(self, token_ids) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    def encode_chat(self, messages: list[dict[str, str]], continue_final_message: bool = False) -> list[int]:
        """The prompt; with `continue_final_message`, the last (assistant) message stays open."""
        try:
            encoded = self._thread_tokenizer().apply_chat_template(
                messages, add_generation_prompt=not continue_final_message,
                continue_final_message=continue_final_message, tokenize=True, return_dict=False,
            )
        except jinja2.TemplateError as error:  # the template's raise_exception(), as many models' do
            raise PromptRefused(f"the model's chat template refuses these messages: {error}") from error
        return list(encoded)

    def encode(self, text: str) -> list[int]:
        """A plain prompt's tokens, special tokens added as the tokenizer adds them."""
        return list(self._thread_tokenizer()(text)["input_ids"])

    def _thread_tokenizer(self):
        """This thread's copy of prompt_tokenizer (made again if prompt_tokenizer was replaced)."""
        mine = self._thread_tokenizers
        if getattr(mine, "source", None) is not self.prompt_tokenizer:
            mine.tokenizer = copy.deepcopy(self.prompt_tokenizer)
            mine.source = self.prompt_tokenizer
        return mine.tokenizer

    # --- the questions the layers above ask ---
    def limits(self) -> EngineLimits:
        return self._limits

    def stats(self) -> EngineStats:
        """Read on the step thread (or with the engine at rest): the cache's counts walk its rows."""
        cache, scheduler = self.kv_cache, self.scheduler
        return EngineStats(
            num_running=scheduler.num_running, num_waiting=scheduler.num_waiting,
            cache_usage=cache.usage, num_cache_bytes=cache.num_allocated_bytes,
            num_reusable_bytes=cache.num_reusable_bytes, num_kept_rows=cache.num_kept_rows,
            num_kept_tokens=cache.num_kept_tokens, num_prefix_hits=scheduler.num_prefix_hits,
            num_reused_tokens=scheduler.num_reused_tokens,
            num_prefilled_tokens=scheduler.num_prefilled_tokens, num_steps=self.num_steps,
            **self.runner.step_counts())

    def decode_step(self) -> GraphState:
        """Where the compiled decode step stands; safe from any thread."""
        return self.runner.graph_state

    def matrix_layout(self) -> str | None:
        """How the fused forward multiplies by its weights (matrices.py), None without one."""
        fused = self.runner.fused
        return None if fused is None else str(fused.layout)

    @property
    def num_running(self) -> int:
        return self.scheduler.num_running

    @property
    def num_waiting(self) -> int:
        """Safe from any thread: the async front counts the queue with it before accepting."""
        return self.scheduler.num_waiting


def end_of_turn_ids(model, tokenizer) -> frozenset[int]:
    """The tokens that end an answer, from every place a model or tokenizer may name them."""
    ids = set()
    for source in (getattr(model, "generation_config", None), model.config, tokenizer):
        value = getattr(source, "eos_token_id", None)
        if isinstance(value, int):
            ids.add(value)
        elif value:
            ids.update(value)
    if not ids:
        raise ValueError("the model names no end-of-turn token (eos_token_id)")
    return frozenset(ids)


def _greedy_only(chunks: list[ScheduledChunk]) -> bool:
    """Whether every chunk that samples takes its greedy token: its step needs no logits."""
    return all(chunk.sequence.params.greedy for chunk in chunks if chunk.samples)
