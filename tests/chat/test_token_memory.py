"""What a web process keeps of the upstream's token counts stays a few MiB however many
conversations it has served: it is kept for the conversations going on, and each forgotten one
costs a count of its whole prompt, not a wrong one (tests/chat/test_prompt_fit.py)."""

import tracemalloc

import pytest

from chatapp.streaming import token_memory
from chatapp.streaming.token_memory import Memory, Piece

UPSTREAM, MODEL = "http://127.0.0.1:8001", "SmolLM2-135M-Instruct"


@pytest.fixture
def empty_memory():
    token_memory.forget()
    yield
    token_memory.forget()


def two_turns(conversation_id: int) -> None:
    """A question counted, its answer generated whole, and the next question counted."""
    memory = Memory(UPSTREAM, MODEL, conversation_id)
    system = Piece.of("system", "You are a helpful assistant.")
    question = Piece.of("user", f"Tell a long story about lighthouse keeper {conversation_id}.")
    answer = f"Once upon a time, keeper {conversation_id} climbed the stairs. " * 8
    memory.learn([system, question], 40)
    memory.answered(answer, 120, ended_by_stop=False)
    follow_up = Piece.of("user", "And then?")
    memory.learn([system, question, Piece.of("assistant", answer), follow_up], 170)


@pytest.mark.slow
def test_twenty_thousand_conversations_leave_a_few_mib_of_counts_in_the_process(empty_memory):
    """Before: bounded at 200,000 messages and 20,000 conversations, about 60 MiB when full,
    and still growing in the soak after ten minutes (RELIABILITY.md)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for conversation_id in range(20_000):
            two_turns(conversation_id)
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()

    assert kept < 8 * 2**20, f"{kept / 2**20:.1f} MiB"


def test_a_conversation_keeps_its_last_count_while_fifteen_hundred_others_come_and_go(empty_memory):
    """Its next question is then the only thing counted."""
    two_turns(0)
    for conversation_id in range(1, 1_500):
        two_turns(conversation_id)

    system = Piece.of("system", "You are a helpful assistant.")
    question = Piece.of("user", "Tell a long story about lighthouse keeper 0.")
    answer = Piece.of("assistant", "Once upon a time, keeper 0 climbed the stairs. " * 8)
    follow_up, next_question = Piece.of("user", "And then?"), Piece.of("user", "Why?")
    prompt = [system, question, answer, follow_up, next_question]
    since = Memory(UPSTREAM, MODEL, 0).new_since_last(prompt)

    assert since == (170, [next_question])
