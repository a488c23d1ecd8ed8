"""One running inference service: the loaded model, its engine, its step loop and its metrics."""

import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from enum import Enum

from .async_engine import AsyncEngine
from .config import InferenceConfig
from .engine import ContextLengthExceeded, EngineConfig, LLMEngine, PromptRefused, SamplingParams
from .engine.captured_steps import CaptureMode
from .engine.decode_graph import CompileMode
from .engine.matrices import MatrixLayout
from .metrics import Metrics
from .protocol import ChatRequest, ProtocolError, TokenizeRequest

# Prompts are encoded off the event loop in two lanes, by their characters: a long one (a pasted
# book, a megabyte of messages: a second or more) never holds up a short one, and the long ones
# are encoded one at a time, so that a crowd of them costs the memory of one. Each thread keeps
# a copy of the tokenizer (about 8 MiB for the default model).
LONG_PROMPT_CHARS = 65_536
SHORT_PROMPT_THREADS = 2
LONG_PROMPT_NICENESS = 10

logger = logging.getLogger(__name__)


class ServiceState(Enum):
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"


class InferenceService:
    def __init__(self, config: InferenceConfig):
        self.config = config
        self.metrics = Metrics()
        self.state = ServiceState.LOADING
        self.error: BaseException | None = None
        self.model_name = ""
        self.engine: LLMEngine | None = None
        self.async_engine: AsyncEngine | None = None
        # The tokenizer's Rust part lets go of the GIL: two cores encode two prompts at once.
        self._short_prompts = ThreadPoolExecutor(max_workers=SHORT_PROMPT_THREADS,
                                                 thread_name_prefix="tokenizer")
        self._long_prompts = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokenizer-long",
                                                initializer=_yield_to_the_rest)
        self._death_listeners: list[Callable[[], None]] = []

    # --- life ---
    def load(self) -> None:
        """Loads the model and starts the step loop (slow: run it off the event loop)."""
        try:
            from .engine import heap, loader  # torch and transformers load here, not at import

            if self.config.threads:
                import torch

                torch.set_num_threads(self.config.threads)
            loaded = loader.load(self.config.model, self.config.cache_dir, self.config.device,
                                 self.config.dtype, self.config.model_name)
            engine = LLMEngine(loaded.model, loaded.tokenizer, self.engine_config())
            heap.trim()  # what loading freed goes back to the system, not kept at its peak
            self.attach(engine, loaded.name)
        except BaseException as error:
            logger.exception("loading the model failed")
            self.error = error
            self.state = ServiceState.FAILED

    def attach(self, engine: LLMEngine, model_name: str) -> None:
        """Serves an engine built elsewhere (tests build one on a tiny model)."""
        self.engine = engine
        self.model_name = model_name
        self.async_engine = AsyncEngine(engine, self.config.max_waiting,
                                        on_cancel=lambda _: self.metrics.cancelled.inc(),
                                        on_death=self._engine_died)
        self.metrics.watch(self.async_engine)
        self.async_engine.start()
        self.state = ServiceState.READY
        logger.info("serving %s, context %d tokens", model_name, self.max_model_len)

    def when_engine_dies(self, listener: Callable[[], None]) -> None:
        """`listener()` runs once, on the step thread, if the step loop dies after an error:
        every open stream has been handed that error by then."""
        self._death_listeners.append(listener)

    def _engine_died(self) -> None:
        for listener in self._death_listeners:
            listener()

    def load_in_background(self) -> threading.Thread:
        thread = threading.Thread(target=self.load, name="model-loader", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        for lane in (self._short_prompts, self._long_prompts):
            lane.shutdown(wait=False, cancel_futures=True)
        if self.async_engine is not None:
            self.async_engine.stop()

    def engine_config(self) -> EngineConfig:
        c = self.config
        return EngineConfig(
            max_running=c.max_running, max_cached_tokens=c.max_cached_tokens,
            max_model_len=c.max_model_len or None, prefill_chunk=c.prefill_chunk,
            prefill_chunk_idle=c.prefill_chunk_idle, cache_group_size=c.cache_group_size,
            prefill_chunk_min=c.prefill_chunk_min, reuse_prefixes=c.prefix_cache,
            prefill_stretch=c.prefill_stretch, prefill_stretch_streams=c.prefill_stretch_streams,
            max_kept_tokens=c.prefix_cache_tokens, matrices=MatrixLayout(c.matrices),
            compile_mode=CompileMode(c.compile), native_step=c.native_step, capture=CaptureMode(c.capture),
            cache_dir=c.cache_dir)

    @property
    def max_model_len(self) -> int:
        """The longest prompt + answer the engine takes (the model's, the configured or the cache's)."""
        return self.engine.limits().max_model_len

    @property
    def healthy(self) -> bool:
        return self.state is ServiceState.READY and self.async_engine.healthy

    def health_error(self) -> str | None:
        if self.state is ServiceState.FAILED:
            return f"loading the model failed: {self.error!r}"
        if self.async_engine is not None and self.async_engine.error is not None:
            return repr(self.async_engine.error)
        return None

    # --- requests ---
    def submit_prompt(self, chat: ChatRequest) -> Future:
        """`prompt_and_params` on a tokenizer thread, so that the caller's loop keeps serving."""
        return self._lane(_characters(chat.messages)).submit(self.prompt_and_params, chat)

    def submit_tokenize(self, request: TokenizeRequest) -> Future:
        """`tokenize` on a tokenizer thread, so that the caller's loop keeps serving."""
        characters = (len(request.prompt or "") if request.messages is None
                      else _characters(request.messages))
        return self._lane(characters).submit(self.tokenize, request)

    def _lane(self, characters: int) -> ThreadPoolExecutor:
        return self._long_prompts if characters >= LONG_PROMPT_CHARS else self._short_prompts

    def prompt_and_params(self, chat: ChatRequest) -> tuple[list[int], SamplingParams]:
        """Tokenizes the conversation and settles the sampling limits, or refuses with a 400."""
        prompt = self.chat_prompt(chat.model, chat.messages, chat.continue_final_message)
        try:
            room = self.engine.limits().answer_room(len(prompt), chat.max_tokens)
        except ContextLengthExceeded as error:
            param = "messages" if error.is_prompt_alone else "max_tokens"
            raise ProtocolError(400, str(error), "context_length_exceeded", param) from error
        max_tokens = chat.max_tokens or min(self.config.default_max_tokens, room)
        params = SamplingParams(max_tokens=max_tokens, temperature=chat.temperature,
                                top_p=chat.top_p, seed=chat.seed, stop=chat.stop)
        return prompt, params

    def tokenize(self, request: TokenizeRequest) -> list[int]:
        """The tokens /tokenize counts: messages exactly as a completion of them is prompted."""
        if request.messages is not None:
            return self.chat_prompt(request.model, request.messages, request.continue_final_message)
        self.check_model(request.model)
        return self.engine.encode(request.prompt)

    def chat_prompt(self, model: str | None, messages: list[dict[str, str]],
                    continue_final_message: bool) -> list[int]:
        """The prompt of a completion of these messages, the chat template applied."""
        self.check_model(model)
        try:
            return self.engine.encode_chat(messages, continue_final_message)
        except PromptRefused as error:
            raise ProtocolError(400, str(error), "invalid_messages", "messages") from error

    def check_model(self, model: str | None) -> None:
        if model is not None and model != self.model_name:
            raise ProtocolError(404, f"the model {model!r} does not exist; this service "
                                f"serves {self.model_name!r}", "model_not_found", "model")


def prepare(config: InferenceConfig) -> str | None:
    """What a first load makes once per machine, made now (the GGUF model converted, our kernels
    built): a service or a test started later then loads in seconds. Why our kernels are not
    used here, if they are not."""
    from .engine import loader, own_kernels

    loader.model_directory(loader.model_path(config.model), config.cache_dir)
    return own_kernels.load(config.cache_dir)


def _characters(messages: list[dict[str, str]]) -> int:
    return sum(len(value) for message in messages for value in message.values())


def _yield_to_the_rest() -> None:
    """Lowers this thread's CPU priority (Linux: a thread is a task of its own): encoding a long
    prompt takes a whole core for a second, and the step thread's parallel products, sharing it,
    would wait at each join for their thread that shares it."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LONG_PROMPT_NICENESS)
    except (AttributeError, OSError):  # not Linux, or not allowed: the same lane at full priority
        pass
