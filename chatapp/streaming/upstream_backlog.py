"""What the upstream has sent and the relay has not yet forwarded: read ahead, taken at once.

One reader task per answer moves the upstream's chunks here as they are parsed. The relay takes
everything that is waiting in one go, so chunks that queued up (several events in one network
read, or chunks that came while the previous event was being written) leave as one event: a
relay that keeps up sends one event per chunk, one that falls behind sends fewer, larger ones
instead of queueing. Nothing here waits on a timer. The first text is always taken alone.
"""

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from common.vocabulary import FinishReason

from ..upstream.inference_client import UpstreamChunk


@dataclass(frozen=True)
class Taken:
    """The chunks that were waiting, as one."""

    text: str  # their text, concatenated in order
    chunks: int  # how many of them carried text: the audit counts upstream chunks, not events
    finish_reason: FinishReason | None
    usage: dict | None


class UpstreamBacklog:
    def __init__(self, chunks: AsyncIterator[UpstreamChunk], on_ready: Callable[[], None]):
        self._texts: list[str] = []
        self._finish_reason: FinishReason | None = None
        self._usage: dict | None = None
        self._ended = False
        self._error: Exception | None = None
        self._on_ready = on_ready
        self.reading = asyncio.create_task(self._read(chunks))  # ends when the upstream does

    @property
    def ended(self) -> bool:
        """The upstream ended (well or not) and everything it sent has been taken."""
        return self._ended and not self._texts and self._error is None

    def take(self, alone: bool = False) -> Taken | None:
        """The waiting chunks (only the first when `alone`), or None when nothing is waiting.

        An upstream failure is raised here, once the text sent before it has been taken.
        """
        if self._texts:
            texts = [self._texts.pop(0)] if alone else self._texts
            if not alone:
                self._texts = []
            ended_with_it = not self._texts and self._ended
            return Taken("".join(texts), len(texts), *self._status(ended_with_it))
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        if self._finish_reason is not None or self._usage is not None:
            return Taken("", 0, *self._status(True))
        return None

    async def aclose(self) -> None:
        """Stops reading; the upstream itself is closed by its owner."""
        self.reading.cancel()
        await asyncio.wait({self.reading})

    def _status(self, release: bool) -> tuple[FinishReason | None, dict | None]:
        """The end's finish reason and usage, handed over once the text before them is."""
        if not release:
            return None, None
        status = self._finish_reason, self._usage
        self._finish_reason = self._usage = None
        return status

    async def _read(self, chunks: AsyncIterator[UpstreamChunk]) -> None:
        try:
            async for chunk in chunks:
                if chunk.text:
                    self._texts.append(chunk.text)
                self._finish_reason = chunk.finish_reason or self._finish_reason
                self._usage = chunk.usage or self._usage
                self._on_ready()
        except Exception as error:  # UpstreamBroken, or a fault of ours: the relay raises it
            self._error = error
        finally:
            self._ended = True
            self._on_ready()
