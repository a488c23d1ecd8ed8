"""The inference service: OpenAI-compatible chat completions over a continuous-batching engine.

Three layers: `server` and `protocol` (HTTP, SSE, validation; no torch), `async_engine`
(coordination: per-request queues, the step thread, cancellation), and `engine/` (scheduler,
KV cache, model runner, sampler; synchronous, no HTTP). The layers above the engine ask it
questions through its door (`limits()`, `stats()`, engine/door.py) and never read its cache
or scheduler.
"""
