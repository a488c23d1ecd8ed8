"""The multi-turn workload: conversations of the promised shape, each turn resending its history."""

import asyncio

from benchmarks.multi_turn import run_conversations
from benchmarks.workload import TURN_MESSAGE_TOKENS, Workload
from tests.inference import models
from tests.inference.serving import MODEL_NAME, serving, service_for


def workload() -> Workload:
    return Workload(models.tokenizer(), seed=7)


def test_conversations_have_the_asked_turns_of_about_200_token_messages():
    conversations = workload().conversations("multi-turn", 4, 6)

    low, high = TURN_MESSAGE_TOKENS
    sizes = [workload().message_size(m) for c in conversations for m in c.user_messages]
    messages = [m for c in conversations for m in c.user_messages]
    assert [c.index for c in conversations] == [0, 1, 2, 3]
    assert all(len(c.user_messages) == 6 for c in conversations)
    assert all(low <= size <= high for size in sizes)
    assert len(set(messages)) == len(messages)


def test_the_same_seed_and_name_give_the_same_conversations():
    assert workload().conversations("a", 2, 3) == workload().conversations("a", 2, 3)
    assert workload().conversations("a", 2, 3) != workload().conversations("b", 2, 3)


def test_each_turn_resends_the_whole_history_with_the_servers_own_answers():
    bench = workload()
    conversations = bench.conversations("multi-turn", 2, 3)
    engine = models.engine(models.tiny_model())

    with serving(service_for(engine)) as url:
        result = asyncio.run(run_conversations(url, MODEL_NAME, bench, conversations, 8, "ours"))

    for conversation, records, history in zip(conversations, result.conversations,
                                              result.histories):
        assert [m["role"] for m in history] == ["user", "assistant"] * 3
        assert [m["content"] for m in history[0::2]] == list(conversation.user_messages)
        assert [m["content"] for m in history[1::2]] == [r.answer for r in records]
        assert all(r.ok and r.answer for r in records)
        sent = [len(bench.encode(history[:2 * turn + 1])) for turn in range(3)]
        assert [r.num_prompt_tokens for r in records] == sent
        assert [r.reported_prompt_tokens for r in records] == sent
    assert [turn["completed"] for turn in result.turns()] == [2, 2, 2]
    assert result.ttft_p50(3) is not None
