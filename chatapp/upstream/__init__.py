"""The upstreams: the OpenAI-compatible servers the chat asks for answers, and what they serve."""
