"""The three in-process references, run on the same converted model and the same token ids.

1. `sequential_generate`: HF `model.generate`, one request at a time (what a naive server does).
2. `manager_closed_loop`: transformers' own continuous batching (ContinuousBatchingManager),
   driven at the same fixed concurrency and on the same request list as the server.
3. `static_batch`: one left-padded batch, one prefill, then a plain greedy loop on a
   DynamicCache for a fixed number of steps, counting B tokens per step whatever the model
   says (no early stop): the ceiling a continuous batcher can approach but not beat.

All three report the same RequestRecord timings as the HTTP load generator, so TTFT, ITL and
throughput mean the same thing in every row of the table.
"""

import logging
import math
import time

import torch
from transformers import AutoModelForCausalLM, DynamicCache, GenerationConfig
from transformers.generation.configuration_utils import ContinuousBatchingConfig
from transformers.generation.streamers import BaseStreamer

from .latency import LevelResult, RequestRecord
from .workload import BenchRequest

logger = logging.getLogger(__name__)

# transformers' default; spelled out because num_blocks below is counted in these pages.
MANAGER_PAGE_SIZE = 256
# Per-step token budget of the manager: room for every decode token at 64 streams plus one
# long prompt, the same order as the server's own idle prefill chunk (512).
MANAGER_MAX_BATCH_TOKENS = 512


def load_model(path, device: str) -> torch.nn.Module:
    return AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32, local_files_only=True).to(device).eval()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class _TokenClock(BaseStreamer):
    """Notes when generate hands over each new token (its first `put` is the prompt)."""

    def __init__(self, record: RequestRecord):
        self.record = record
        self.seen_prompt = False

    def put(self, value) -> None:
        if not self.seen_prompt:
            self.seen_prompt = True
            return
        self.record.arrivals.append(time.perf_counter())

    def end(self) -> None:
        pass


@torch.inference_mode()
def sequential_generate(model, requests: list[BenchRequest], eos: list[int],
                        pad_id: int) -> LevelResult:
    device = model.device
    _generate_one(model, requests[0].prompt_token_ids[:16], 4, eos, pad_id, None)  # warm-up
    records = []
    started = time.perf_counter()
    for request in requests:
        record = RequestRecord(request.index, request.max_tokens, request.num_prompt_tokens,
                               sent_at=time.perf_counter())
        output = _generate_one(model, request.prompt_token_ids, request.max_tokens, eos, pad_id,
                               _TokenClock(record))
        _sync(device)
        record.finished_at = time.perf_counter()
        record.completion_tokens = output.shape[1] - request.num_prompt_tokens
        record.finish_reason = "stop" if int(output[0, -1]) in eos else "length"
        records.append(record)
    return LevelResult("hf-generate", 1, time.perf_counter() - started, records)


def _generate_one(model, prompt: list[int], max_new_tokens: int, eos: list[int], pad_id: int,
                  streamer):
    input_ids = torch.tensor([prompt], device=model.device)
    return model.generate(
        input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=max_new_tokens,
        do_sample=False, eos_token_id=eos, pad_token_id=pad_id, streamer=streamer,
    )


@torch.inference_mode()
def manager_closed_loop(model, requests: list[BenchRequest], concurrency: int, eos: list[int],
                        pad_id: int, timeout_s: float = 600.0) -> LevelResult:
    """Keeps `concurrency` requests in the manager: a new one goes in as soon as one finishes."""
    longest = max(r.num_prompt_tokens + r.max_tokens for r in requests)
    # Sized explicitly: left alone, the manager reserves a share of the machine's whole memory.
    num_blocks = concurrency * math.ceil(longest / MANAGER_PAGE_SIZE) + 2
    generation = GenerationConfig(do_sample=False,
                                  max_new_tokens=max(r.max_tokens for r in requests),
                                  eos_token_id=eos, pad_token_id=pad_id)
    batching = ContinuousBatchingConfig(
        page_size=MANAGER_PAGE_SIZE, num_blocks=num_blocks,
        max_batch_tokens=max(MANAGER_MAX_BATCH_TOKENS, concurrency),
        max_requests_per_batch=concurrency,
    )
    manager = model.init_continuous_batching(generation_config=generation,
                                             continuous_batching_config=batching)
    # As the library's own context manager does: captures CUDA graphs on a GPU, nothing on a CPU.
    manager.warmup()
    manager.start()
    try:
        # Builds the paged cache and runs a first step outside the timed part, as the server's
        # own warm-up request does.
        manager.add_request(requests[0].prompt_token_ids[:16], request_id="warm-up",
                            max_new_tokens=4)
        _await_result(manager, "warm-up", timeout_s)

        by_id: dict[str, RequestRecord] = {}
        queue = list(reversed(requests))

        def submit() -> None:
            request = queue.pop()
            request_id = f"bench-{request.index}"
            by_id[request_id] = RequestRecord(request.index, request.max_tokens,
                                              request.num_prompt_tokens,
                                              sent_at=time.perf_counter())
            manager.add_request(request.prompt_token_ids, request_id=request_id,
                                max_new_tokens=request.max_tokens, record_timestamps=True)

        started = time.perf_counter()
        for _ in range(min(concurrency, len(queue))):
            submit()
        unfinished = len(requests)
        while unfinished:
            result = manager.get_result(timeout=timeout_s)
            if result is None:
                raise RuntimeError(f"the manager gave no result for {timeout_s:.0f}s "
                                   f"(running: {manager.is_running()})")
            if not result.is_finished() or result.request_id not in by_id:
                continue
            record = by_id[result.request_id]
            record.finished_at = time.perf_counter()
            record.arrivals = list(result.timestamps or [])
            record.completion_tokens = len(result.generated_tokens)
            record.error = result.error
            if result.generated_tokens:
                record.finish_reason = "stop" if result.generated_tokens[-1] in eos else "length"
            unfinished -= 1
            if queue:
                submit()
        wall = time.perf_counter() - started
    finally:
        manager.stop(block=True, timeout=30)
        manager.destroy()
    records = sorted(by_id.values(), key=lambda r: r.index)
    extra = {"num_blocks": num_blocks, "page_size": MANAGER_PAGE_SIZE,
             "max_batch_tokens": batching.max_batch_tokens}
    return LevelResult("hf-manager", concurrency, wall, records, extra=extra)


def _await_result(manager, request_id: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = manager.get_result(timeout=1.0)
        if result is not None and result.request_id == request_id and result.is_finished():
            if result.error:
                raise RuntimeError(f"the manager's warm-up failed: {result.error}")
            return
    raise RuntimeError(f"the manager's warm-up gave no result in {timeout_s:.0f}s")


@torch.inference_mode()
def static_batch(model, requests: list[BenchRequest], steps: int, pad_id: int) -> LevelResult:
    """The first len(requests) prompts as one batch, decoded for exactly `steps` tokens each."""
    _static_run(model, [r.prompt_token_ids[:16] for r in requests[:2]], 4, pad_id)  # warm-up
    prompts = [r.prompt_token_ids for r in requests]
    started, times = _static_run(model, prompts, steps, pad_id)
    records = []
    for request in requests:
        record = RequestRecord(request.index, steps, request.num_prompt_tokens, sent_at=started,
                               arrivals=list(times), finished_at=times[-1],
                               completion_tokens=steps, finish_reason="length")
        records.append(record)
    longest = max(len(p) for p in prompts)
    extra = {"steps": steps, "padded_prompt_tokens": longest * len(prompts),
             "prefill_s": times[0] - started,
             "decode_tokens_per_s": len(prompts) * (steps - 1) / (times[-1] - times[0])
             if steps > 1 else None}
    return LevelResult("static-batch", len(requests), times[-1] - started, records, extra=extra)


def _static_run(model, prompts: list[list[int]], steps: int,
                pad_id: int) -> tuple[float, list[float]]:
    device = model.device
    batch, longest = len(prompts), max(len(p) for p in prompts)
    input_ids = torch.full((batch, longest), pad_id, dtype=torch.long)
    mask = torch.zeros((batch, longest), dtype=torch.long)
    for row, prompt in enumerate(prompts):  # left padding: every row's last token is aligned
        input_ids[row, longest - len(prompt):] = torch.tensor(prompt)
        mask[row, longest - len(prompt):] = 1
    input_ids, mask = input_ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache(config=model.config)
    _sync(device)
    started = time.perf_counter()
    logits = model(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                   cache=cache, use_cache=True, logits_to_keep=1).logits
    times = []
    for step in range(steps):
        next_ids = logits[:, -1].argmax(-1, keepdim=True)
        _sync(device)
        times.append(time.perf_counter())
        if step == steps - 1:
            break
        mask = torch.cat([mask, torch.ones((batch, 1), dtype=mask.dtype, device=device)], dim=1)
        positions = positions[:, -1:] + 1
        logits = model(input_ids=next_ids, attention_mask=mask, position_ids=positions,
                       cache=cache, use_cache=True).logits
    return started, times
