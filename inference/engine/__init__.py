"""The engine layer: synchronous, no asyncio, no HTTP. One `LLMEngine.step()` is one forward pass."""

from .llm_engine import LLMEngine, RequestOutput
from .sequence import SamplingParams

__all__ = ["LLMEngine", "RequestOutput", "SamplingParams"]
