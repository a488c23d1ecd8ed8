"""Prometheus metrics of the inference service: one registry per service instance."""

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2, 5, 10, 30, 60)


class Metrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("inference_requests", "Finished requests by finish_reason.",
                                ["finish_reason"], registry=r)
        self.cancelled = Counter("inference_requests_cancelled",
                                 "Requests whose client went away before their end reached it.", registry=r)
        self.ttft = Histogram("inference_time_to_first_token_seconds",
                              "Request received to first token sent.", buckets=LATENCY_BUCKETS, registry=r)
        self.itl = Histogram("inference_inter_token_latency_seconds",
                             "Gap between consecutive tokens of one stream.", buckets=LATENCY_BUCKETS,
                             registry=r)
        self.queue_wait = Histogram("inference_queue_wait_seconds",
                                    "Arrival to admission into the running batch.",
                                    buckets=LATENCY_BUCKETS, registry=r)
        self.generated_tokens = Counter("inference_generated_tokens", "Output tokens.", registry=r)
        self.prompt_tokens = Counter("inference_prompt_tokens", "Prompt tokens.", registry=r)
        self.running = Gauge("inference_running_sequences", "Sequences in the batch.", registry=r)
        self.waiting = Gauge("inference_waiting_sequences", "Sequences waiting for room.", registry=r)
        self.cache_usage = Gauge("inference_kv_cache_usage_ratio",
                                 "Allocated share of the KV cache token budget.", registry=r)
        self.cache_bytes = Gauge("inference_kv_cache_bytes", "Memory held by the KV cache.", registry=r)
        self.reusable_bytes = Gauge("inference_kv_cache_reusable_bytes",
                                    "KV cache memory held only by kept prefixes, given up on demand.",
                                    registry=r)
        self.kept_prefixes = Gauge("inference_prefix_cache_kept_rows",
                                   "Finished sequences' cache rows kept for reuse.", registry=r)
        self.kept_tokens = Gauge("inference_prefix_cache_kept_tokens",
                                 "Tokens whose keys and values kept rows hold (bounded by "
                                 "INFERENCE_PREFIX_CACHE_TOKENS).", registry=r)

    def watch(self, engine) -> None:
        """Gauges and the prefix counters read the engine's latest `stats()` when scraped.

        `engine` is the async front (async_engine.py), whose step thread takes the snapshot.
        """
        self.running.set_function(lambda: engine.stats().num_running)
        self.waiting.set_function(lambda: engine.stats().num_waiting)
        self.cache_usage.set_function(lambda: engine.stats().cache_usage)
        self.cache_bytes.set_function(lambda: engine.stats().num_cache_bytes)
        self.reusable_bytes.set_function(lambda: engine.stats().num_reusable_bytes)
        self.kept_prefixes.set_function(lambda: engine.stats().num_kept_rows)
        self.kept_tokens.set_function(lambda: engine.stats().num_kept_tokens)
        self.registry.register(_EngineCounters(engine))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class RequestClock:
    """Times one request's tokens into the histograms."""

    def __init__(self, metrics: Metrics):
        self.metrics = metrics
        self.started = time.monotonic()
        self.last_token_at: float | None = None

    def tokens(self, outputs) -> None:
        """Times engine outputs sent together, each its own token: after the first, at no gap."""
        now = time.monotonic()
        for output in outputs:
            if self.last_token_at is None:
                self.metrics.ttft.observe(now - self.started)
            else:
                self.metrics.itl.observe(now - self.last_token_at)
            if output.queue_wait_s is not None:
                self.metrics.queue_wait.observe(output.queue_wait_s)
            self.last_token_at = now
        self.metrics.generated_tokens.inc(len(outputs))


class _EngineCounters:
    """The engine's counts since start, as Prometheus counters, read when scraped."""

    def __init__(self, engine):
        self.engine = engine

    def collect(self):
        stats = self.engine.stats()
        for name, help_text, value in [
            ("inference_prefix_cache_hits", "Requests that started from a cached prefix.", stats.num_prefix_hits),
            ("inference_prefix_cache_reused_tokens", "Prompt tokens taken from a cached prefix instead of fed.",
             stats.num_reused_tokens),
            ("inference_prompt_tokens_prefilled", "Prompt tokens fed through the model.",
             stats.num_prefilled_tokens),
            ("inference_steps", "Forward passes of the engine, every kind.", stats.num_steps),
            ("inference_steps_compiled", "Decode steps run as one step: our own C++ step or the compiled graph.",
             stats.num_compiled_steps),
            ("inference_steps_replayed", "Compiled decode steps replayed from a captured CUDA graph.",
             stats.num_replayed_steps),
        ]:
            yield CounterMetricFamily(name, help_text, value=value)
