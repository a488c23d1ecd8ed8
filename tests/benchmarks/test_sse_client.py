"""The load generator sends again, once, when a server drops a kept-alive connection unanswered."""

from benchmarks.sse_client import new_client, stream_chat
from benchmarks.workload import BenchRequest
from tests.fakes.keepalive_dropper import KeepaliveDropper

REQUEST = BenchRequest(0, [{"role": "user", "content": "Hello"}], [1, 2, 3], 4, False)


async def test_a_request_on_a_dropped_keepalive_connection_is_sent_again_on_a_fresh_one():
    server = KeepaliveDropper()
    url = await server.start() + "/v1/chat/completions"
    try:
        async with new_client(1, 10.0) as client:
            first = await stream_chat(client, url, "m", REQUEST)
            second = await stream_chat(client, url, "m", REQUEST)
    finally:
        await server.stop()

    assert first.ok and first.reconnects == 0
    assert second.ok and second.reconnects == 1 and second.answer == "Hi"
    assert second.reported_prompt_tokens == 3
    assert server.connections == 2
