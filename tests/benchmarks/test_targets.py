"""The targets compare ours with llama.cpp measured in the same run, and say N/A without it."""

from benchmarks import targets
from benchmarks.inference_bench import DeviceRun
from benchmarks.inference_table import LLAMA_CPP_F32, OURS, llama_cpp_system
from benchmarks.latency import LevelResult, RequestRecord
from benchmarks.multi_turn import MultiTurnResult


def answer(ttft: float, itl: float, tokens: int = 10) -> RequestRecord:
    arrivals = [ttft + i * itl for i in range(tokens)]
    return RequestRecord(0, tokens, 50, sent_at=0.0, arrivals=arrivals, finished_at=arrivals[-1],
                         completion_tokens=tokens)


def level(system: str, streams: int, wall_s: float, ttft: float = 1.0,
          itl: float = 0.1) -> LevelResult:
    return LevelResult(system, streams, wall_s, [answer(ttft, itl)])


def conversations(system: str, ttfts: list[float]) -> MultiTurnResult:
    return MultiTurnResult(system, 10.0, [[answer(ttft, 0.1) for ttft in ttfts]] * 2)


def verdicts(run: DeviceRun) -> dict[str, bool | None]:
    return {t["name"]: t["passed"] for t in targets.evaluate(run)}


def test_ours_must_beat_llama_cpps_throughput_by_a_tenth_from_4_streams_up():
    run = DeviceRun("cpu", "CPU", levels=[
        level(OURS, 4, wall_s=1.0), level(LLAMA_CPP_F32, 4, wall_s=1.05),
        level(OURS, 16, wall_s=1.0), level(LLAMA_CPP_F32, 16, wall_s=2.0),
        level(OURS, 64, wall_s=2.0), level(LLAMA_CPP_F32, 64, wall_s=1.0),
    ])

    assert verdicts(run)["throughput @4: ours >= 1.1 x llama.cpp F32"] is False
    assert verdicts(run)["throughput @16: ours >= 1.1 x llama.cpp F32"] is True
    assert verdicts(run)["throughput @64: ours >= 1.1 x llama.cpp F32"] is False


def test_ttft_and_single_stream_itl_are_compared_with_llama_cpps():
    run = DeviceRun("cpu", "CPU", levels=[
        level(OURS, 1, 1.0, itl=0.095), level(LLAMA_CPP_F32, 1, 1.0, itl=0.1),
        level(OURS, 4, 1.0, ttft=2.0), level(LLAMA_CPP_F32, 4, 1.0, ttft=1.0),
        level(OURS, 64, 1.0, ttft=1.0), level(LLAMA_CPP_F32, 64, 1.0, ttft=2.0),
    ])

    assert verdicts(run)["ITL p50 @1: ours <= 0.9 x llama.cpp F32"] is False
    assert verdicts(run)["TTFT p50 @4: ours <= llama.cpp F32"] is False
    assert verdicts(run)["TTFT p50 @16: ours <= llama.cpp F32"] is None
    assert verdicts(run)["TTFT p50 @64: ours <= llama.cpp F32"] is True


def test_a_bf16_run_of_ours_is_compared_with_llama_cpps_bf16_not_its_f32():
    bf16 = llama_cpp_system("bf16")
    run = DeviceRun("cpu", "CPU", peer=bf16, levels=[
        level(OURS, 1, 1.0, itl=0.08), level(bf16, 1, 1.0, itl=0.1),
        level(LLAMA_CPP_F32, 1, 1.0, itl=0.05),
    ])

    assert verdicts(run)["ITL p50 @1: ours <= 0.9 x llama.cpp BF16"] is True
    assert not any("F32" in name for name in verdicts(run))


def test_the_last_turn_is_held_to_the_first_turn_and_to_llama_cpps_last_turn():
    run = DeviceRun("cpu", "CPU", multi_turn=[conversations(OURS, [1.0, 1.2, 1.4]),
                                              conversations(LLAMA_CPP_F32, [0.5, 0.8, 1.2])])

    assert verdicts(run)["multi-turn: ours TTFT p50 at turn 3 <= 1.5 x at turn 1"] is True
    assert verdicts(run)["multi-turn: ours TTFT p50 at turn 3 <= llama.cpp F32's"] is False


def test_without_llama_cpp_its_targets_are_not_measured():
    run = DeviceRun("cpu", "CPU", levels=[level(OURS, 16, 1.0)],
                    multi_turn=[conversations(OURS, [1.0, 1.2])])

    assert verdicts(run)["throughput @16: ours >= 1.1 x llama.cpp F32"] is None
    assert verdicts(run)["multi-turn: ours TTFT p50 at turn 2 <= llama.cpp F32's"] is None
    assert verdicts(run)["multi-turn: ours TTFT p50 at turn 2 <= 1.5 x at turn 1"] is True


def cancel_figures(cancelled_counter: float, finished_counter: float,
                   after_p50: float = 0.015) -> dict:
    # 16 streams, 7 cancelled: 9 survivors, each finished by the server in its own time.
    return {"streams": 16, "cancelled": 7, "itl_before_s": {"p50": 0.025, "p90": 0.028, "n": 120},
            "itl_after_s": {"p50": after_p50, "p90": 0.018, "n": 90},
            "server_dropped_within_s": 0.063, "server_cancelled_counter_delta": cancelled_counter,
            "server_finished_counter_delta": finished_counter}


def cancel_verdict(figures: dict) -> bool | None:
    run = DeviceRun("cpu", "CPU", cancel=figures)
    return next(passed for name, passed in verdicts(run).items() if name.startswith("cancel"))


def test_the_cancel_check_passes_when_the_server_counts_every_cancelled_stream_cancelled():
    assert cancel_verdict(cancel_figures(cancelled_counter=7, finished_counter=9)) is True


def test_a_cancelled_stream_whose_answer_ran_out_before_its_cancel_arrived_counts_finished():
    # A quick bfloat16 run of cdbcfed: a stream's answer ran out as the client cancelled it.
    assert cancel_verdict(cancel_figures(cancelled_counter=6, finished_counter=10)) is True


def test_the_cancel_check_fails_where_a_cancelled_stream_is_neither_cancelled_nor_finished():
    assert cancel_verdict(cancel_figures(cancelled_counter=6, finished_counter=9)) is False


def test_the_cancel_check_fails_where_the_survivors_got_slower():
    assert cancel_verdict(cancel_figures(7, 9, after_p50=0.030)) is False
