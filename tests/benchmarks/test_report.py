"""The published section shows llama.cpp's rows, ours / llama.cpp ratios and TTFT per turn."""

from benchmarks import inference_table, targets
from benchmarks.inference_bench import DeviceRun
from benchmarks.inference_table import LLAMA_CPP_F32, OURS, OURS_NO_REUSE
from tests.benchmarks.test_targets import conversations, level

MACHINE = {"cpu": "a CPU", "cores": 2, "memory_gb": 8.0, "python": "3.11", "torch": "2.13",
           "transformers": "5.24", "threads": 2, "load_average": "0.1", "commit": "abc",
           "gpu": None, "llama_cpp": "llama-cpp-python 0.3.36 (llama.cpp commit 0c1e570980)"}
PLAN = {"seed": 1, "threads": 2, "static_steps": 8, "manager_levels": [16, 64],
        "cancel_after_chunks": 4, "turn_max_tokens": 64, "quick": False,
        "precision": "float32", "compile": "", "llama_cpp_outtypes": ["f32"]}
WORKLOAD = {"requests_per_level": {4: 1}, "long_prompt_share": 0.5, "prompt_tokens_min": 50,
            "prompt_tokens_max": 50, "max_tokens_values": [10],
            "multi_turn": {"conversations": 2, "turns": 2, "user_message_tokens_min": 191,
                           "user_message_tokens_max": 200}}


def section(run: DeviceRun) -> str:
    run.targets = targets.evaluate(run)
    results = inference_table.Results(command="python -m benchmarks inference", plan=PLAN,
                             machine=MACHINE, runs=[run], started=0.0, finished=60.0,
                             workload=WORKLOAD)
    return inference_table.render_section(results)


def test_the_section_compares_ours_with_llama_cpp_level_by_level_and_turn_by_turn():
    peer = level(LLAMA_CPP_F32, 4, wall_s=2.0, ttft=2.0)
    peer.extra |= {"prompt_tokens_agree": "1/1", "same_answer_as_ours": "1/1"}
    run = DeviceRun("cpu", "CPU", levels=[level(OURS, 4, wall_s=1.0), peer],
                    multi_turn=[conversations(OURS, [1.0, 1.1]),
                                conversations(OURS_NO_REUSE, [1.0, 3.0]),
                                conversations(LLAMA_CPP_F32, [0.9, 1.0])])

    text = section(run)

    assert "| llama.cpp F32 (HTTP/SSE) | 4 | 1/1 | 5.0 |" in text
    assert "| 4 | 10.0 (100 ms) | 5.0 (100 ms) | 2.00x | 0.50x | 1.00x | 1/1 | 1/1 |" in text
    assert "| 2 | 50 | 1100 | 3000 | 1000 |" in text
    assert "- **PASS** TTFT p50 @4: ours <= llama.cpp F32: 1000 vs 2000 ms = 0.50x" in text
    assert "- **FAIL** multi-turn: ours TTFT p50 at turn 2 <= llama.cpp F32's" in text
    assert "converted to F32 GGUF" in text and "ours served at `INFERENCE_DTYPE=float32`," in text


def test_without_llama_cpp_or_conversations_their_tables_are_left_out():
    text = section(DeviceRun("cpu", "CPU", levels=[level(OURS, 4, wall_s=1.0)]))

    assert "ours / llama.cpp" not in text
    assert "Multi-turn, TTFT p50" not in text
