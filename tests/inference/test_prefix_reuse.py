"""A prompt that starts like an earlier one is fed only its new tokens, and answers the same.

A chat client re-sends the whole conversation each turn: the engine keeps a finished answer's
cache row and the next turn starts from it. Reuse must never change a token (greedy), and a
kept row must never stand in the way of a running request's memory.
"""

import httpx2
import pytest

from common.vocabulary import FinishReason
from inference.engine import SamplingParams
from inference.engine.kv_cache import BLOCK_TOKENS
from tests.inference import models
from tests.inference.serving import chat, metric, service_for, serving, stream

USER_TURNS = [
    "Tell me about the old harbour in a few sentences.",
    "Why did the fishermen leave it? Give two reasons and explain each of them.",
    "Write a short poem about the harbour at night, with the lighthouse and the boats.",
    "Now summarise everything we talked about in one paragraph, for a child of ten.",
]


def converse(engine, turns: list[str], max_tokens: int) -> list[dict]:
    """Plays a conversation turn by turn, each prompt the whole history as a client sends it."""
    messages, records = [], []
    for number, content in enumerate(turns):
        messages.append({"role": "user", "content": content})
        prompt = models.engine_tokenizer_prompt(messages)
        request_id = f"turn-{number}"
        engine.add_request(request_id, prompt, SamplingParams(max_tokens=max_tokens))
        outputs = drain(engine)[request_id]
        answer = "".join(o.text for o in outputs)
        records.append({"tokens": [o.token_id for o in outputs], "reused": outputs[-1].num_reused_tokens,
                        "prompt": len(prompt), "answer": answer})
        messages.append({"role": "assistant", "content": answer})
    return records


def drain(engine) -> dict[str, list]:
    outputs: dict[str, list] = {}
    while engine.has_work():
        for output in engine.step():
            outputs.setdefault(output.request_id, []).append(output)
    return outputs


@pytest.mark.slow
def test_a_real_conversation_answers_token_for_token_the_same_with_and_without_reuse():
    # A model each: an engine takes its model over (it fuses the projections; packing would release them).
    with_reuse = converse(models.engine(models.real_model()), USER_TURNS, max_tokens=16)
    without = converse(models.engine(models.real_model(), reuse_prefixes=False), USER_TURNS, max_tokens=16)

    assert [turn["tokens"] for turn in with_reuse] == [turn["tokens"] for turn in without]
    assert with_reuse[0]["reused"] == 0 and all(turn["reused"] == 0 for turn in without)
    for earlier, later in zip(with_reuse, with_reuse[1:]):
        # Each turn starts from the last one's prompt at least, and feeds at least one token.
        assert earlier["prompt"] <= later["reused"] < later["prompt"]


def test_the_next_turn_takes_over_the_finished_turns_cache_row_when_it_fits():
    engine = models.engine(models.tiny_model(), max_cached_tokens=8192)
    first = list(range(3, 103))
    engine.add_request("first", first, SamplingParams(max_tokens=20))
    answer = [o.token_id for o in drain(engine)["first"]]
    kept_slot = engine.scheduler.prefixes.kept_slots()[0]

    engine.add_request("second", first + answer + [7, 8, 9], SamplingParams(max_tokens=4))
    engine.scheduler.schedule()
    second = engine.scheduler.running[0]

    assert second.slot == kept_slot
    assert second.num_reused_tokens == second.num_cached_tokens == len(first) + len(answer) - 1
    assert engine.kv_cache.num_kept_rows == 0


def test_a_prompt_too_long_for_the_kept_row_copies_the_shared_part_into_a_row_of_its_own():
    model = models.tiny_model()
    prompt = list(range(3, 60))

    def run(reuse: bool) -> tuple[list[int], int, int]:
        engine = models.engine(model, reuse_prefixes=reuse, max_cached_tokens=8192)
        engine.add_request("short", prompt, SamplingParams(max_tokens=4))
        drain(engine)
        engine.add_request("long", prompt + [11] * 2 * BLOCK_TOKENS, SamplingParams(max_tokens=4))
        outputs = drain(engine)["long"]
        return [o.token_id for o in outputs], outputs[-1].num_reused_tokens, engine.kv_cache.num_kept_rows

    reused_tokens, reused, kept = run(True)
    fresh_tokens, _, _ = run(False)

    assert reused == len(prompt)
    assert kept == 1  # the long one's row holds all the short one's held that it needed
    assert reused_tokens == fresh_tokens


def test_requests_sharing_a_system_prompt_each_start_from_a_copy_of_it():
    model = models.tiny_model()
    system = list(range(3, 83))
    questions = {f"q{i}": system + [100 + i] * (5 + i) for i in range(3)}

    def run(reuse: bool) -> dict[str, list]:
        engine = models.engine(model, reuse_prefixes=reuse)
        engine.add_request("warm", system + [99] * 80, SamplingParams(max_tokens=2))
        drain(engine)
        for request_id, prompt in questions.items():
            engine.add_request(request_id, prompt, SamplingParams(max_tokens=6))
        return drain(engine)

    shared, fresh = run(True), run(False)

    for request_id in questions:
        assert [o.token_id for o in shared[request_id]] == [o.token_id for o in fresh[request_id]]
        assert shared[request_id][-1].num_reused_tokens == len(system)


def test_a_kept_row_that_a_prompt_only_starts_like_stays_for_the_next_one():
    engine = models.engine(models.tiny_model())
    system = list(range(3, 43))
    engine.add_request("warm", system + [99] * 60, SamplingParams(max_tokens=2))
    drain(engine)
    engine.add_request("question", system + [7, 8], SamplingParams(max_tokens=2))

    reused = drain(engine)["question"][-1].num_reused_tokens

    assert reused == len(system)
    assert engine.kv_cache.num_kept_rows == 2  # the warm-up's row and the question's


def test_a_request_starting_like_a_running_one_copies_its_cached_prompt():
    engine = models.engine(models.tiny_model(), prefill_chunk_idle=64)
    system = list(range(3, 203))
    engine.add_request("first", system + [5], SamplingParams(max_tokens=30))
    engine.step()  # 64 of its prompt tokens are cached now
    engine.add_request("second", system + [6], SamplingParams(max_tokens=2))

    outputs = drain(engine)

    assert outputs["second"][-1].num_reused_tokens == 64


def test_a_running_request_takes_memory_from_kept_rows_oldest_first():
    engine = models.engine(models.tiny_model(), max_cached_tokens=8 * BLOCK_TOKENS, cache_group_size=1)
    for name in ["oldest", "middle", "newest"]:
        engine.add_request(name, [ord(name[0])] * (2 * BLOCK_TOKENS - 2), SamplingParams(max_tokens=2))
        drain(engine)
    assert engine.kv_cache.num_kept_rows == 3  # 6 of the 8 blocks

    engine.add_request("big", list(range(3, 4 * BLOCK_TOKENS + 1)), SamplingParams(max_tokens=2))
    engine.scheduler.schedule()

    kept = [tokens[0] for tokens in engine.scheduler.prefixes.kept_token_ids()]
    assert [s.request_id for s in engine.scheduler.running] == ["big"]
    assert kept == [ord("m"), ord("n")]  # the oldest gave its two blocks up, no more


def test_kept_rows_hold_no_more_tokens_than_their_own_budget_the_oldest_leaving_first():
    engine = models.engine(models.tiny_model(), max_kept_tokens=250)
    for name in ["oldest", "middle", "newest"]:
        engine.add_request(name, [ord(name[0])] * 98, SamplingParams(max_tokens=3))
        drain(engine)

    kept = engine.scheduler.prefixes.kept_token_ids()

    assert [tokens[0] for tokens in kept] == [ord("m"), ord("n")]  # 2 x 100 cached tokens
    assert engine.kv_cache.num_kept_tokens == 200 == sum(len(tokens) for tokens in kept)


def test_a_failed_requests_row_is_never_kept():
    engine = models.engine(models.tiny_model())
    engine.add_request("nan", [5, 6, 7, 8], SamplingParams(max_tokens=5, temperature=float("nan")))

    outputs = drain(engine)["nan"]

    assert outputs[-1].finish_reason is FinishReason.ERROR
    assert engine.kv_cache.num_kept_rows == 0 and engine.kv_cache.num_allocated_bytes == 0


def test_with_prefix_reuse_off_nothing_is_kept():
    engine = models.engine(models.tiny_model(), reuse_prefixes=False)
    engine.add_request("a", [5, 6, 7, 8], SamplingParams(max_tokens=3))
    drain(engine)
    engine.add_request("b", [5, 6, 7, 8, 9], SamplingParams(max_tokens=3))

    outputs = drain(engine)["b"]

    assert outputs[-1].num_reused_tokens == 0
    assert engine.kv_cache.num_allocated_bytes == 0


@pytest.mark.parametrize("stream_it", [True, False])
def test_the_api_counts_every_prompt_token_and_says_how_many_came_from_the_cache(stream_it):
    engine = models.engine(models.tiny_model())
    history = [{"role": "user", "content": "Name three colours of the sea at dawn."}]
    with serving(service_for(engine)) as url:
        first = usage_of(url, chat(messages=history, max_tokens=5, temperature=0), stream_it)
        history += [{"role": "assistant", "content": "Grey, silver and pale green."},
                    {"role": "user", "content": "And at night?"}]
        second = usage_of(url, chat(messages=history, max_tokens=5, temperature=0), stream_it)
        text = httpx2.get(f"{url}/metrics").text

    prompt_tokens = len(models.engine_tokenizer_prompt(history))
    assert first["prompt_tokens_details"]["cached_tokens"] == 0
    assert second["prompt_tokens"] == prompt_tokens
    assert first["prompt_tokens"] <= second["prompt_tokens_details"]["cached_tokens"] < prompt_tokens
    assert metric(text, "inference_prefix_cache_hits_total") == 1
    assert metric(text, "inference_prefix_cache_reused_tokens_total") == second["prompt_tokens_details"]["cached_tokens"]
    assert metric(text, "inference_prompt_tokens_prefilled_total") == (
        first["prompt_tokens"] + prompt_tokens - second["prompt_tokens_details"]["cached_tokens"])


def usage_of(url: str, body: dict, stream_it: bool) -> dict:
    if stream_it:
        _, events = stream(url, {**body, "stream": True, "stream_options": {"include_usage": True}})
        return events[-2]["usage"]
    return httpx2.post(f"{url}/v1/chat/completions", json=body, timeout=60).json()["usage"]
