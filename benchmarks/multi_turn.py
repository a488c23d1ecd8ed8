"""Conversations side by side, each turn resending the whole history as a chat client does.

Every conversation is its own client: it sends turn k+1 as soon as turn k's answer is complete,
with that answer appended to its history, so each system continues from its own answers. What
matters is how TTFT grows with the history: a server that keeps a conversation's cache
prefills only the new message; one that does not prefills everything again, every turn.
"""

import asyncio
import time
from dataclasses import dataclass, field

from common.percentiles import percentile

from .latency import RequestRecord, spread
from .sse_client import new_client, stream_chat
from .workload import Conversation, Workload


@dataclass
class MultiTurnResult:
    system: str
    wall_s: float
    # One list per conversation, one record per turn; a failed turn ends its conversation.
    conversations: list[list[RequestRecord]]
    # Each conversation's messages as last sent, plus the last answer (not in the JSON: bulky).
    histories: list[list[dict[str, str]]] = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    @property
    def num_turns(self) -> int:
        return max((len(records) for records in self.conversations), default=0)

    def turn_records(self, turn: int) -> list[RequestRecord]:
        """The completed records of `turn` (1-based), one per conversation that got that far."""
        return [records[turn - 1] for records in self.conversations
                if len(records) >= turn and records[turn - 1].ok]

    def ttft_p50(self, turn: int) -> float | None:
        return percentile([r.ttft for r in self.turn_records(turn) if r.ttft is not None], 50)

    def turns(self) -> list[dict]:
        out = []
        for turn in range(1, self.num_turns + 1):
            records = self.turn_records(turn)
            cached = [r.cached_tokens for r in records if r.cached_tokens is not None]
            out.append({
                "turn": turn,
                "completed": len(records),
                "prompt_tokens_p50": percentile([r.num_prompt_tokens for r in records], 50),
                "ttft_s": spread([r.ttft for r in records if r.ttft is not None]),
                "itl_s": spread([gap for r in records for gap in r.itls]),
                "completion_tokens_p50": percentile([r.completion_tokens for r in records], 50),
                "cached_tokens_p50": percentile(cached, 50) if cached else None,
            })
        return out

    def errors(self) -> list[str]:
        return [r.error for records in self.conversations for r in records if r.error]

    def to_json(self) -> dict:
        return {"system": self.system, "wall_s": self.wall_s, "turns": self.turns(),
                "errors": self.errors(), **self.extra,
                "conversations": [[r.brief() for r in records] for records in self.conversations]}


async def run_conversations(base_url: str, model: str, workload: Workload,
                            conversations: list[Conversation], max_tokens: int, system: str,
                            timeout_s: float = 600.0) -> MultiTurnResult:
    url = f"{base_url}/v1/chat/completions"
    async with new_client(len(conversations), timeout_s) as client:

        async def talk(conversation: Conversation, history: list[dict[str, str]]
                       ) -> list[RequestRecord]:
            records = []
            for message in conversation.user_messages:
                history.append({"role": "user", "content": message})
                request = workload.turn_request(conversation, history, max_tokens)
                record = await stream_chat(client, url, model, request)
                records.append(record)
                if not record.ok:
                    break  # no answer to continue from
                history.append({"role": "assistant", "content": record.answer})
            return records

        histories: list[list[dict[str, str]]] = [[] for _ in conversations]
        started = time.perf_counter()
        per_conversation = await asyncio.gather(*(talk(c, h) for c, h in zip(conversations,
                                                                             histories)))
        wall = time.perf_counter() - started
    return MultiTurnResult(system, wall, list(per_conversation), histories)
