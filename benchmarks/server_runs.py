"""The systems measured over HTTP, one at a time: ours and llama.cpp's.

Each server is warmed up and driven with the same client on the same requests. Ours starts once
for the concurrency levels, the cancel check and the conversations, then once more with prefix
reuse off for the conversations alone. llama.cpp's server fixes its number of slots at start, so
it starts once per level, with as many slots as streams, and once for the conversations, with a
slot per conversation.

A level is served by ours and then, right after, by each peer, ours waiting idle meanwhile (it
keeps its compiled step: a start costs a minute): this project's machines drift by 20-30% within
minutes, and with every level of ours first, one stream's ITL set against llama.cpp's a quarter
of an hour later read 1.20x and 0.86x in two runs of the same code minutes apart. The cancel
check and the conversations follow the levels.
"""

import asyncio
import logging
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from harness.child_process import ChildProcess

from . import inference_table
from .cancel_check import cancel_experiment
from .inference_table import OURS, OURS_NO_REUSE, llama_cpp_system
from .latency import LevelResult
from .machine_load import ForeignLoad
from .multi_turn import MultiTurnResult, run_conversations
from .server_process import LlamaServerProcess, ServerProcess
from .sse_client import run_closed_loop

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Peer:
    """llama.cpp's server built here, on one of its GGUF files."""
    binary: Path
    gguf: Path
    outtype: str


class ServerRuns:
    def __init__(self, plan, parts, workload, lists, cancel_list, warm_up, conversations):
        self.plan, self.parts, self.workload = plan, parts, workload
        self.lists, self.cancel_list, self.warm_up = lists, cancel_list, warm_up
        self.conversations = conversations

    def run(self, device_run, cache_dir: Path, peers: list[Peer]) -> None:
        """Every level by ours then by each peer, then our cancel check, then the conversations."""
        with self._ours(device_run, cache_dir) as ours:
            if self.parts.levels:
                for level in self.plan.levels:
                    if ours is not None:
                        self._level(device_run, ours, OURS, level)
                    for peer in peers:
                        self._peer_level(device_run, peer, level)
                if ours is not None:
                    self._cancel(device_run, ours)
                    device_run.server_peak_is_per_level = ours.peak_is_per_level
            if ours is not None and self.conversations:
                self._multi_turn(device_run, ours, OURS)
        if self.conversations:
            for peer in peers:
                self._peer_conversations(device_run, peer)
            if self.parts.ours:
                with self._serving(device_run, ServerProcess(self._env(device_run, cache_dir)
                                                             | {"INFERENCE_PREFIX_CACHE": "0"})) as server:
                    self._multi_turn(device_run, server, OURS_NO_REUSE)

    # --- ours ---
    def _ours(self, device_run, cache_dir: Path):
        """Our server, started and warmed up, for as long as the levels and conversations take."""
        if not self.parts.ours or not (self.parts.levels or self.conversations):
            return nullcontext(None)
        return self._serving(device_run, ServerProcess(self._env(device_run, cache_dir)))

    def _env(self, device_run, cache_dir: Path) -> dict[str, str]:
        env = {
            "INFERENCE_DEVICE": device_run.device,
            # float32 unless asked: the references run fp32, as does llama.cpp's F32 peer.
            "INFERENCE_DTYPE": self.plan.precision,
            "INFERENCE_THREADS": str(self.plan.threads),
            "INFERENCE_CACHE_DIR": str(cache_dir),
            "INFERENCE_MAX_RUNNING": str(max((64, *self.plan.levels))),
        }
        if self.plan.compile:
            env["INFERENCE_COMPILE"] = self.plan.compile
        return env

    def _cancel(self, device_run, server: ServerProcess) -> None:
        logger.info("[%s] cancel: %d streams, half cancelled mid-stream", device_run.label,
                    len(self.cancel_list))
        server.reset_peak()
        with ForeignLoad([server.pid]) as load:
            device_run.cancel = asyncio.run(cancel_experiment(server, self.cancel_list,
                                                              self.plan.cancel_after_chunks))
        device_run.cancel["other_cpu_cores"] = load.cores

    # --- llama.cpp ---
    def _peer_server(self, peer: Peer, slots: int) -> LlamaServerProcess:
        return LlamaServerProcess(peer.binary, peer.gguf, slots, self.plan.threads, alias=peer.gguf.stem)

    def _peer_level(self, device_run, peer: Peer, level: int) -> None:
        with self._serving(device_run, self._peer_server(peer, level)) as running:
            result = self._level(device_run, running, llama_cpp_system(peer.outtype), level)
        self._compare_with_ours(device_run, result)

    def _peer_conversations(self, device_run, peer: Peer) -> None:
        with self._serving(device_run, self._peer_server(peer, len(self.conversations))) as running:
            result = self._multi_turn(device_run, running, llama_cpp_system(peer.outtype))
        records = [r for turn in result.conversations for r in turn if r.ok]
        result.extra["prompt_tokens_agree"] = _agreement(records)

    def _compare_with_ours(self, device_run, result: LevelResult) -> None:
        """Sanity of the peer: the same prompt token counts (so the same chat template and
        vocabulary, read from the GGUF file) and, mostly, the same greedy answers as ours."""
        result.extra["prompt_tokens_agree"] = _agreement(result.completed)
        ours = device_run.find(OURS, result.concurrency)
        if ours is None:
            return
        answers = {r.index: r.answer for r in ours.completed}
        pairs = [(r.answer, answers[r.index]) for r in result.completed if r.index in answers]
        result.extra["same_answer_as_ours"] = f"{sum(a == b for a, b in pairs)}/{len(pairs)}"

    # --- shared ---
    def _serving(self, device_run, server: ChildProcess):
        return _serving(device_run, server, self.warm_up)

    def _level(self, device_run, server, system: str, level: int) -> LevelResult:
        requests = self.lists[level]
        server.reset_peak()
        logger.info("[%s] %s at %d streams: %d requests", device_run.label, system, level,
                    len(requests))
        with ForeignLoad([server.pid]) as load:
            result = asyncio.run(run_closed_loop(server.base_url, server.model_name, requests,
                                                 level, system))
        result.extra["peak_rss_bytes"] = server.peak_rss_bytes()
        result.extra["other_cpu_cores"] = load.cores
        logger.info("[%s] %s", device_run.label, inference_table.level_line(result))
        device_run.levels.append(result)
        return result

    def _multi_turn(self, device_run, server, system: str) -> MultiTurnResult:
        logger.info("[%s] %s: %d conversations of %d turns", device_run.label, system,
                    len(self.conversations), self.plan.turns)
        with ForeignLoad([server.pid]) as load:
            result = asyncio.run(run_conversations(
                server.base_url, server.model_name, self.workload, self.conversations,
                self.plan.turn_max_tokens, system))
        result.extra["other_cpu_cores"] = load.cores
        logger.info("[%s] %s", device_run.label, inference_table.multi_turn_line(result))
        device_run.multi_turn.append(result)
        return result


@contextmanager
def _serving(device_run, server: ChildProcess, warm_up):
    """The server started and warmed up; stopped on the way out, its log shown on a failure."""
    logger.info("[%s] starting %s on port %d", device_run.label, server.name, server.port)
    try:
        server.start()
        if getattr(server, "matrices", None):
            logger.info("[%s] %s multiplies in the %s layout", device_run.label, server.name, server.matrices)
        asyncio.run(run_closed_loop(server.base_url, server.model_name, warm_up, 2, "warm-up"))
        yield server
    except BaseException:
        logger.error("%s log tail:\n%s", server.name, server.log_tail())
        raise
    finally:
        server.close()


def _agreement(records) -> str:
    """How many of these requests the server counted as many prompt tokens as our tokenizer."""
    reported = [r for r in records if r.reported_prompt_tokens is not None]
    same = sum(r.reported_prompt_tokens == r.num_prompt_tokens for r in reported)
    return f"{same}/{len(reported)}"
