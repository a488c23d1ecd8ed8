"""What the layers above may ask the engine: its limits and its state, never its insides.

The service, the metrics and any stand-in engine speak through these answers (`limits()`,
`stats()`, and `decode_step()`: a GraphState, read live, as a background compile may end while
no step runs), so the cache and the scheduler can change shape without anyone above the engine
noticing.
"""

from dataclasses import dataclass
from enum import StrEnum


class GraphState(StrEnum):
    """Where the compiled decode step stands (decode_graph.py; the service's /health says)."""

    COMPILING = "compiling"  # under AUTO, in the background: the fused forward serves meanwhile
    COMPILED = "compiled"  # it runs the steps it can (under AUTO, the kinds it was timed faster for)
    UNCOMPILED = "uncompiled"  # off, not possible here, or its compile failed: the fused forward


class ContextLengthExceeded(ValueError):
    """A prompt, or a prompt with the answer asked for, that one sequence cannot hold."""

    def __init__(self, message: str, is_prompt_alone: bool):
        super().__init__(message)
        # True: the prompt leaves no room for any answer; False: max_tokens asks for too much.
        self.is_prompt_alone = is_prompt_alone


class PromptRefused(ValueError):
    """Messages the model's chat template refuses, in its own words (a system message where it
    takes none, turns that do not alternate)."""


@dataclass(frozen=True)
class EngineLimits:
    # The longest prompt + answer: the model's own context, the configured one when lower, and
    # never more than one sequence may hold in the cache.
    max_model_len: int
    max_num_seqs: int
    max_cached_tokens: int  # the KV cache's budget, shared by every sequence

    def answer_room(self, num_prompt_tokens: int, max_tokens: int | None) -> int:
        """Answer tokens a prompt leaves in the context, or ContextLengthExceeded.

        The one place the context is checked: the service asks before a stream opens, the
        engine again when the request arrives.
        """
        room = self.max_model_len - num_prompt_tokens
        if room < 1:
            raise ContextLengthExceeded(
                f"the prompt has {num_prompt_tokens} tokens; this model's context holds "
                f"{self.max_model_len} including the answer", is_prompt_alone=True)
        if max_tokens is not None and max_tokens > room:
            raise ContextLengthExceeded(
                f"max_tokens {max_tokens} does not fit: the prompt has {num_prompt_tokens} tokens "
                f"and {room} remain of the context", is_prompt_alone=False)
        return room


@dataclass(frozen=True)
class EngineStats:
    """The engine's state between two steps; the counts since start only ever grow."""

    num_running: int = 0
    num_waiting: int = 0
    cache_usage: float = 0.0  # allocated share of the cache's token budget
    num_cache_bytes: int = 0
    num_reusable_bytes: int = 0  # held only by kept prefixes, given up on demand
    num_kept_rows: int = 0
    num_kept_tokens: int = 0
    num_prefix_hits: int = 0
    num_reused_tokens: int = 0
    num_prefilled_tokens: int = 0
    num_steps: int = 0
    # Decode steps run as one step (our C++ step or the compiled graph), and of those, replayed
    # from a captured CUDA graph: what a deployment reads to know which path served it.
    num_compiled_steps: int = 0
    num_replayed_steps: int = 0
