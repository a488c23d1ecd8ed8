"""The engine layer: synchronous, no asyncio, no HTTP. One `LLMEngine.step()` is one forward pass.

The layers above build it from an `EngineConfig` and then only ask it questions through its
door (door.py: `limits()`, `stats()`, `decode_step()`); its cache and scheduler stay its own.
"""

from .door import ContextLengthExceeded, EngineLimits, EngineStats, GraphState, PromptRefused
from .llm_engine import EngineConfig, LLMEngine, RequestOutput
from .sequence import SamplingParams

__all__ = ["ContextLengthExceeded", "EngineConfig", "EngineLimits", "EngineStats", "GraphState",
           "LLMEngine", "PromptRefused", "RequestOutput", "SamplingParams"]
