"""A stand-in for the model engine, so a benchmark measures the inference service's HTTP layer.

It plugs in where `LLMEngine` does (`InferenceService.attach`, hence `AsyncEngine`) through the
engine's door only (`limits()`, `stats()`, `decode_step()`, requests in and steps out), runs no
model, and steps on a fixed schedule, every `step_s`: each step gives every running request one
token, so N streams are offered N / step_s tokens a second. A late step does not push the next ones
back. A request's answer is known in advance: the prompt is the label in its last message, token i
is `token_text(label, i)`, and it ends after `max_tokens` tokens.

`python -m benchmarks.stand_in_engine --port P --step-ms 2` serves it with the real app under
uvicorn, as `python -m inference` serves the model.
"""

import argparse
import logging
import time

import uvicorn

from common.vocabulary import FinishReason
from inference.config import InferenceConfig
from inference.engine import EngineLimits, EngineStats, GraphState, RequestOutput, SamplingParams
from inference.server import create_app
from inference.service import InferenceService

MODEL_NAME = "stand-in"
CONTEXT_TOKENS = 1 << 20


def token_text(label: str, index: int) -> str:
    return f"{label}:{index} "


def answer_text(label: str, count: int) -> str:
    return "".join(token_text(label, i) for i in range(count))


class _Request:
    def __init__(self, request_id: str, label: str, max_tokens: int):
        self.request_id, self.label, self.max_tokens = request_id, label, max_tokens
        self.num_output_tokens = 0


class StandInEngine:
    """`LLMEngine`'s door without a model: what `AsyncEngine` and `InferenceService` ask of it."""

    num_waiting = 0  # every request runs from the next step on

    def __init__(self, step_s: float):
        self.step_s = step_s
        self.num_steps = 0
        self._running: dict[str, _Request] = {}
        self._next_step_at = 0.0

    def limits(self) -> EngineLimits:
        return EngineLimits(max_model_len=CONTEXT_TOKENS, max_num_seqs=CONTEXT_TOKENS,
                            max_cached_tokens=CONTEXT_TOKENS)

    def stats(self) -> EngineStats:
        return EngineStats(num_running=len(self._running))

    def decode_step(self) -> GraphState:
        return GraphState.UNCOMPILED

    def matrix_layout(self) -> str | None:
        return None

    def encode(self, text: str) -> list[int]:
        return [ord(character) for character in text]

    def encode_chat(self, messages: list[dict], continue_final_message: bool = False) -> list[int]:
        return self.encode(messages[-1]["content"])

    def add_request(self, request_id: str, prompt_token_ids: list[int],
                    params: SamplingParams) -> None:
        if not self._running:  # from idle: the schedule starts now
            self._next_step_at = time.monotonic() + self.step_s
        label = "".join(chr(token) for token in prompt_token_ids)
        self._running[request_id] = _Request(request_id, label, params.max_tokens)

    def abort_request(self, request_id: str) -> bool:
        return self._running.pop(request_id, None) is not None

    def abort_all(self) -> None:
        self._running.clear()

    def has_work(self) -> bool:
        return bool(self._running)

    def step(self) -> list[RequestOutput]:
        delay = self._next_step_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        self._next_step_at += self.step_s
        self.num_steps += 1
        outputs = [self._advance(request) for request in list(self._running.values())]
        for output in outputs:
            if output.finished:
                del self._running[output.request_id]
        return outputs

    def _advance(self, request: _Request) -> RequestOutput:
        index = request.num_output_tokens
        request.num_output_tokens += 1
        finished = request.num_output_tokens >= request.max_tokens
        return RequestOutput(
            request.request_id, index, token_text(request.label, index), len(request.label),
            request.num_output_tokens, FinishReason.LENGTH if finished else None,
            queue_wait_s=0.0 if index == 0 else None)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.stand_in_engine", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--step-ms", type=float, default=2.0)
    parser.add_argument("--max-waiting", type=int, default=1024)
    arguments = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    service = InferenceService(InferenceConfig(max_waiting=arguments.max_waiting))
    service.attach(StandInEngine(arguments.step_ms / 1000), MODEL_NAME)
    uvicorn.run(create_app(service, load=False), host="127.0.0.1", port=arguments.port,
                log_level="warning", timeout_keep_alive=30)


if __name__ == "__main__":
    main()
