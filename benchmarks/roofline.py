"""The memory roofline of a decode step: how fast this machine reads memory, and how many bytes
one token must read.

A decode step for one stream multiplies one row by every weight matrix: it reads each weight
once and does two operations per weight, far too few to keep the CPU busy, so no step can be
faster than the weights' bytes divided by the memory bandwidth. The bandwidth is measured like
STREAM's copy and triad kernels (a[:] = b; a[:] = b + s * c) on arrays far larger than the
caches, with torch on the given number of threads, counting the bytes read and written.
"""

import time

# Elements per array (float32): 3 x 256 MB for triad, beyond any last-level cache we have met.
ELEMENTS = 64 * 1024 * 1024
ROUNDS = 5


def bandwidth(threads: int) -> dict[str, float]:
    """Bytes per second of the copy and triad kernels, the fastest of ROUNDS each."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b, c = (torch.rand(ELEMENTS) for _ in range(3))
        size = a.element_size() * ELEMENTS
        kernels = {"copy": (lambda: a.copy_(b), 2 * size),
                   "triad": (lambda: torch.add(b, c, alpha=3.0, out=a), 3 * size)}
        figures = {}
        for name, (kernel, moved) in kernels.items():
            kernel()
            fastest = min(_seconds(kernel) for _ in range(ROUNDS))
            figures[name] = moved / fastest
        return figures
    finally:
        torch.set_num_threads(previous)


def _seconds(kernel) -> float:
    started = time.perf_counter()
    kernel()
    return time.perf_counter() - started


def weight_bytes(config, element_size: int, head_element_size: int | None = None) -> int:
    """Bytes of weights a Llama-shaped decode step reads for one token: every layer's
    projections and norms, the final norm and the output matrix (one embedding row is noise).
    `head_element_size`: the output matrix's, where the step reads it in another type (the
    native step's screen, a greedy step's)."""
    hidden, inner = config.hidden_size, config.intermediate_size
    head_dim = getattr(config, "head_dim", None) or hidden // config.num_attention_heads
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    per_layer = (hidden * (heads + 2 * kv_heads) * head_dim + heads * head_dim * hidden
                 + 3 * hidden * inner + 2 * hidden)
    layers = (config.num_hidden_layers * per_layer + hidden) * element_size
    return layers + config.vocab_size * hidden * (head_element_size or element_size)
