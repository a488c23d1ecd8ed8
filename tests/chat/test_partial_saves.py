"""The relays' partial answers are saved together, never after an answer's final write."""

import asyncio
import threading

import pytest
from django.db import connection

from chatapp import services
from chatapp.runtime.database_threads import on_database_thread
from chatapp.models import Generation, Message
from chatapp.streaming.partial_saves import PartialSaves
from common.vocabulary import GenerationStatus
from tests import factories
from tests.chat.database_outage import database_refusing_new_sessions, terminate_the_database_threads_backends

pytestmark = pytest.mark.django_db(transaction=True)


def streaming_answers(count: int):
    return [factories.generation(factories.message(role="assistant", status="streaming", content=""),
                                 status=GenerationStatus.STREAMING) for _ in range(count)]


def partial(generation, text: str, before: str = "") -> services.PartialText:
    return services.PartialText(generation.pk, generation.message_id, before, text)


class HeldWrites:
    """Counts the writes of partial answers and can hold the next one until released."""

    def __init__(self, monkeypatch):
        self.batches: list[list[int]] = []
        self.holding = threading.Event()
        self.release = threading.Event()
        self.release.set()
        real = services.generation_save_partials

        def counted(*, partials):
            self.batches.append([p.generation_id for p in partials])
            self.holding.set()
            self.release.wait(10)
            return real(partials=partials)

        monkeypatch.setattr(services, "generation_save_partials", counted)

    def hold(self) -> None:
        self.holding.clear()
        self.release.clear()

    async def held(self) -> None:
        await asyncio.to_thread(self.holding.wait, 10)


async def test_texts_handed_in_while_a_write_runs_are_saved_together_by_the_next(monkeypatch):
    first, *others = await on_database_thread(streaming_answers)(4)
    writes, saves = HeldWrites(monkeypatch), PartialSaves()
    writes.hold()
    saves.hand_in(partial(first, "one"))
    await writes.held()
    for generation in others:
        saves.hand_in(partial(generation, "two"))
    saves.hand_in(partial(others[0], "three"))  # a newer text of a waiting answer replaces it
    writes.release.set()
    await saves.settled()
    assert writes.batches == [[first.pk], [g.pk for g in others]]
    contents = await on_database_thread(
        lambda: [Message.objects.get(pk=g.message_id).content for g in [first, *others]])()
    assert contents == ["one", "three", "two", "two"]


async def test_a_withdrawn_answer_waits_for_the_write_that_holds_it_and_loses_what_still_waits(monkeypatch):
    held, waiting = await on_database_thread(streaming_answers)(2)
    writes, saves = HeldWrites(monkeypatch), PartialSaves()
    writes.hold()
    saves.hand_in(partial(held, "in the write"))
    await writes.held()
    saves.hand_in(partial(waiting, "never written"))
    withdrawing = asyncio.create_task(saves.withdraw(held.pk))
    await saves.withdraw(waiting.pk)  # nothing of it is in a write: returns at once
    assert not withdrawing.done()
    writes.release.set()
    await withdrawing
    await saves.settled()
    assert writes.batches == [[held.pk]]


def test_only_answers_still_streaming_are_written():
    live, ended = streaming_answers(2)
    Generation.objects.filter(pk=ended.pk).update(status=GenerationStatus.COMPLETED, final_text="final")
    written = services.generation_save_partials(
        partials=[partial(live, "more", before="earlier "), partial(ended, "stale")])
    assert written == [live.pk]
    live.refresh_from_db(), ended.refresh_from_db()
    assert (live.final_text, Message.objects.get(pk=live.message_id).content) == ("more", "earlier more")
    assert ended.final_text == "final"


def test_a_save_taken_before_a_page_handed_back_more_text_does_not_shorten_it_when_written_after():
    (answer,) = streaming_answers(1)
    taken = partial(answer, "Hello")  # the relay's text then; it sent more, which its page hands back
    services.generation_recover(generation_id=answer.pk, pieces=[services.SentPiece(0, "Hello, world")])

    written = services.generation_save_partials(partials=[taken])

    answer.refresh_from_db()
    assert written == [answer.pk]  # its heartbeat, at least
    assert (answer.final_text, Message.objects.get(pk=answer.message_id).content) == ("Hello, world",) * 2


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a server that refuses sessions")
def test_a_save_the_database_refuses_is_one_warning_line_not_a_traceback(caplog):
    [answer] = streaming_answers(1)

    async def hand_in_and_settle():
        saves = PartialSaves()
        saves.hand_in(partial(answer, "during an outage"))
        await saves.settled()

    with database_refusing_new_sessions():
        terminate_the_database_threads_backends()
        asyncio.run(hand_in_and_settle())

    [logged] = [record for record in caplog.records if record.name == "chatapp.streaming.partial_saves"]
    assert (logged.levelname, logged.exc_info) == ("WARNING", None)
    assert "the database refused it" in logged.getMessage()
