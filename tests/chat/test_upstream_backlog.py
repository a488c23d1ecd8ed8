"""The backlog between the upstream and the relay: what is waiting is taken as one."""

import asyncio

import pytest

from chatapp.upstream.inference_client import UpstreamBroken, UpstreamChunk
from chatapp.streaming.upstream_backlog import UpstreamBacklog

async def scripted(chunks, then=None):
    for chunk in chunks:
        yield chunk
    if then is not None:
        raise then

async def backlog_of(chunks, then=None) -> UpstreamBacklog:
    """A backlog that has read the whole script (its reader's task has ended)."""
    backlog = UpstreamBacklog(scripted(chunks, then), lambda: None)
    await asyncio.wait({backlog.reading})
    return backlog

async def test_everything_waiting_is_taken_as_one_in_order_with_the_end_after_it():
    backlog = await backlog_of([UpstreamChunk("a"), UpstreamChunk("b"), UpstreamChunk("c"),
                                UpstreamChunk("", "stop", {"completion_tokens": 3})])

    taken = backlog.take()

    assert (taken.text, taken.chunks) == ("abc", 3)
    assert (taken.finish_reason, taken.usage) == ("stop", {"completion_tokens": 3})
    assert backlog.take() is None and backlog.ended

async def test_taken_alone_the_first_chunk_leaves_the_rest_and_the_end_waiting():
    backlog = await backlog_of([UpstreamChunk("a"), UpstreamChunk("b"), UpstreamChunk("", "stop")])

    first, rest = backlog.take(alone=True), backlog.take()

    assert (first.text, first.chunks, first.finish_reason) == ("a", 1, None)
    assert (rest.text, rest.chunks, rest.finish_reason) == ("b", 1, "stop")

async def test_a_failure_is_raised_only_after_the_text_before_it_was_taken():
    backlog = await backlog_of([UpstreamChunk("a"), UpstreamChunk("b")],
                               then=UpstreamBroken("upstream_disconnected", "gone"))

    taken = backlog.take()

    assert taken.text == "ab"
    with pytest.raises(UpstreamBroken):
        backlog.take()
    assert backlog.ended
