"""The inference benchmark's table (inference_bench.py measures): the systems by name, a row per
system and level, ours against llama.cpp, multi-turn TTFT per turn, caveats, the terminal's view
and the BENCHMARKS.md section. The plot is inference_plot.py."""

from dataclasses import dataclass
from pathlib import Path

from .machine_load import DISTURBED_CORES
from .report import (MARKDOWN_PATH, cores, markdown_table, ms, stamp, target_line, text_table, triple,
                     write_results, write_section)

OURS, OURS_NO_REUSE = "ours", "ours-no-reuse"


def llama_cpp_system(outtype: str) -> str:
    return f"llama.cpp-{outtype}"


LLAMA_CPP_F32 = llama_cpp_system("f32")
# Ours at each precision it can be served at, and the GGUF precision of the same arithmetic.
PEER_OUTTYPE = {"float32": "f32", "bfloat16": "bf16"}

SYSTEM_ORDER = {"hf-generate": 0, OURS: 1, OURS_NO_REUSE: 2, LLAMA_CPP_F32: 3,
                llama_cpp_system("bf16"): 4, llama_cpp_system("f16"): 5,
                llama_cpp_system("q8_0"): 6, "hf-manager": 7, "static-batch": 8}

SYSTEM_NAMES = {
    OURS: "ours (HTTP/SSE)",
    OURS_NO_REUSE: "ours, prefix reuse off (HTTP/SSE)",
    LLAMA_CPP_F32: "llama.cpp F32 (HTTP/SSE)",
    llama_cpp_system("bf16"): "llama.cpp BF16 (HTTP/SSE)",
    llama_cpp_system("f16"): "llama.cpp F16 (HTTP/SSE)",
    llama_cpp_system("q8_0"): "llama.cpp Q8_0 (HTTP/SSE)",
    "hf-generate": "HF generate, 1 at a time",
    "hf-manager": "HF ContinuousBatchingManager",
    "static-batch": "static batch (ceiling)",
}

COLUMNS = ["system", "streams", "ok/reqs", "out tok/s", "req/s", "TTFT ms p50/p90/p99",
           "ITL ms p50/p90/p99", "TPOT ms p50/p90/p99", "peak RSS", "other CPU"]


@dataclass
class Results:
    command: str
    plan: dict
    machine: dict
    runs: list  # of inference_bench.DeviceRun
    started: float
    finished: float
    workload: dict

    def to_json(self) -> dict:
        return {
            "benchmark": "inference",
            "command": self.command,
            "started": stamp(self.started),
            "duration_s": round(self.finished - self.started, 1),
            "plan": self.plan,
            "machine": self.machine,
            "workload": self.workload,
            "runs": [{
                "device": run.device,
                "label": run.label,
                "levels": [dict(level.summary(), records=[r.brief() for r in level.records])
                           for level in _ordered(run.levels)],
                "multi_turn": [result.to_json() for result in run.multi_turn],
                "cancel": run.cancel,
                "targets": run.targets,
                "failures": run.failures,
            } for run in self.runs],
        }


def _ordered(levels: list) -> list:
    return sorted(levels, key=lambda l: (l.concurrency, SYSTEM_ORDER.get(l.system, 9)))


def _rows(run) -> list[list[str]]:
    rows = []
    for level in _ordered(run.levels):
        s = level.summary()
        peak = s.get("peak_rss_bytes")
        streams = str(s["concurrency"]) + (" (batch)" if level.system == "static-batch" else "")
        rows.append([
            SYSTEM_NAMES.get(level.system, level.system), streams,
            f"{s['completed']}/{s['requests']}",
            f"{s['output_tokens_per_s']:.1f}" if s["output_tokens_per_s"] else "-",
            f"{s['requests_per_s']:.2f}" if s["requests_per_s"] else "-",
            triple(s["ttft_s"]), triple(s["itl_s"]), triple(s["tpot_s"]),
            f"{peak / 1e9:.2f} GB" if peak else "-",
            cores(s.get("other_cpu_cores")) + (" !" if _disturbed(s) else ""),
        ])
    return rows


def level_line(result) -> str:
    """One line of progress for a LevelResult."""
    s = result.summary()
    itl = s["itl_s"]
    return (f"{result.system} @{result.concurrency}: {s['output_tokens_per_s'] or 0:.1f} tok/s, "
            f"{s['completed']}/{s['requests']} ok, ITL p50 {ms(itl['p50'])} p99 {ms(itl['p99'])} "
            f"ms, {s['wall_s']:.1f}s, other CPU {cores(s.get('other_cpu_cores'))}")


def multi_turn_line(result) -> str:
    ttfts = "/".join(ms(turn["ttft_s"]["p50"]) for turn in result.turns())
    completed = sum(turn["completed"] for turn in result.turns())
    total = len(result.conversations) * result.num_turns
    return (f"{result.system}: TTFT p50 by turn {ttfts} ms, {completed}/{total} turns ok, "
            f"{result.wall_s:.1f}s, other CPU {cores(result.extra.get('other_cpu_cores'))}")


def _ratio(value: float | None, reference: float | None) -> str:
    return "-" if not value or not reference else f"{value / reference:.2f}x"


def peer_name(run) -> str:
    """The peer's name in prose: "llama.cpp F32" for a run of ours at float32."""
    return SYSTEM_NAMES[run.peer].removesuffix(" (HTTP/SSE)")


def llama_cpp_rows(run) -> list[list[str]]:
    """Ours against llama.cpp at ours' precision at each level, as ratios; empty when either is
    missing."""
    rows = []
    for level in sorted({l.concurrency for l in run.levels}):
        ours, peer = run.find(OURS, level), run.find(run.peer, level)
        if ours is None or peer is None:
            continue
        o, p = ours.summary(), peer.summary()
        rows.append([
            str(level),
            f"{o['output_tokens_per_s'] or 0:.1f} ({ms(o['itl_s']['p50'])} ms)",
            f"{p['output_tokens_per_s'] or 0:.1f} ({ms(p['itl_s']['p50'])} ms)",
            _ratio(o["output_tokens_per_s"], p["output_tokens_per_s"]),
            _ratio(o["ttft_s"]["p50"], p["ttft_s"]["p50"]),
            _ratio(o["itl_s"]["p50"], p["itl_s"]["p50"]),
            p.get("prompt_tokens_agree", "-"), p.get("same_answer_as_ours", "-"),
        ])
    if not rows:
        return []
    return [["streams", "ours tok/s (ITL p50)", f"{peer_name(run)} tok/s (ITL p50)",
             "ours / llama.cpp tok/s", "TTFT p50 ours / llama.cpp", "ITL p50 ours / llama.cpp",
             "llama.cpp: same prompt tokens", "same answer as ours"]] + rows


def multi_turn_rows(run) -> list[list[str]]:
    """TTFT p50 per turn, a column per system (with its cached prompt tokens when reported)."""
    results = sorted(run.multi_turn, key=lambda r: SYSTEM_ORDER.get(r.system, 9))
    if not results:
        return []
    header = ["turn", "prompt tokens p50"] + [
        f"{SYSTEM_NAMES.get(r.system, r.system)} TTFT p50 ms (cached tokens)" for r in results]
    rows = [header]
    turns = [result.turns() for result in results]
    for index in range(max(len(t) for t in turns)):
        prompt = next((t[index]["prompt_tokens_p50"] for t in turns if index < len(t)), None)
        row = [str(index + 1), "-" if prompt is None else f"{prompt:.0f}"]
        for per_turn in turns:
            if index >= len(per_turn):
                row.append("-")
                continue
            turn = per_turn[index]
            cached = turn["cached_tokens_p50"]
            row.append(ms(turn["ttft_s"]["p50"]) + ("" if cached is None else f" ({cached:.0f})"))
        rows.append(row)
    return rows


def _disturbed(summary: dict) -> bool:
    return (summary.get("other_cpu_cores") or 0.0) > DISTURBED_CORES


def caveat_lines(run) -> list[str]:
    """Failed references, and a warning for each measurement that other processes disturbed."""
    flagged = [f"{SYSTEM_NAMES.get(s['system'], s['system'])} @{s['concurrency']} "
               f"({s['other_cpu_cores']:.2f} cores)"
               for s in (level.summary() for level in _ordered(run.levels)) if _disturbed(s)]
    if (run.cancel.get("other_cpu_cores") or 0.0) > DISTURBED_CORES:
        flagged.append(f"the cancel experiment ({run.cancel['other_cpu_cores']:.2f} cores)")
    flagged += [f"{SYSTEM_NAMES.get(r.system, r.system)} multi-turn "
                f"({r.extra['other_cpu_cores']:.2f} cores)" for r in run.multi_turn
                if (r.extra.get("other_cpu_cores") or 0.0) > DISTURBED_CORES]
    failures = [f"FAILED reference {failure}" for failure in run.failures]
    if not flagged:
        return failures
    return failures + [f"WARNING: other processes used more than {DISTURBED_CORES} cores during: "
            + ", ".join(flagged) + ". Those figures are not trustworthy; rerun on a quiet machine."]


def target_lines(run) -> list[str]:
    return [target_line(t) for t in run.targets]


def print_results(results: Results) -> None:
    for run in results.runs:
        print(f"\n=== inference benchmark, {run.label} ===")
        if run.levels:
            print("\n".join(text_table(COLUMNS, _rows(run))))
        for title, rows in ((f"ours / {peer_name(run)}", llama_cpp_rows(run)),
                            ("multi-turn", multi_turn_rows(run))):
            if rows:
                print(f"\n{title}:\n" + "\n".join(text_table(rows[0], rows[1:])))
        print()
        for line in target_lines(run) + caveat_lines(run):
            print(line)
    print(f"\ncommand: {results.command}")


def write_json(results: Results) -> Path:
    return write_results("inference", results.to_json(), results.started)


def write_markdown(results: Results, path: Path = MARKDOWN_PATH) -> Path:
    return write_section("inference", render_section(results), path)


def render_section(results: Results) -> str:
    m, p, w = results.machine, results.plan, results.workload
    lines = ["## Inference server", ""]
    if p.get("quick"):
        lines += ["**Quick smoke run: tiny counts and answers, not representative. Run the full "
                  "command below for real figures.**", ""]
    lines += [
        f"Command: `{results.command}` (started {stamp(results.started)}, "
        f"{(results.finished - results.started) / 60:.1f} min, commit {m['commit']}).",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gb']:.0f} GB RAM"
        + (f", GPU {m['gpu']}" if m.get("gpu") else ", no GPU")
        + f"; Python {m['python']}, torch {m['torch']}, transformers {m['transformers']}; "
        f"load average at start {m['load_average']}. Server: `INFERENCE_THREADS={p['threads']}`; "
        f"references: `torch.set_num_threads({p['threads']})`, in this process after the servers "
        "stopped. The load generator shares the machine with the server it drives; no two "
        "systems ever run at the same time: each level is served by ours, then by llama.cpp's "
        "right after it (ours waiting idle), so that the machine's drift over the run moves both alike.",
        "",
    ]
    if m.get("llama_cpp"):
        lines += [
            f"llama.cpp: `llama-server` from the {m['llama_cpp']} sdist (its vendored llama.cpp, "
            "built here with `GGML_NATIVE=ON`), serving the same weights converted to "
            f"{' and '.join(x.upper() for x in p['llama_cpp_outtypes'])} GGUF by its own "
            "`convert_hf_to_gguf.py`; the chat template and vocabulary come from "
            "that file. It starts once per level with `--parallel N -c N*2048 -t "
            f"{p['threads']} -tb {p['threads']}` (a slot per stream, each holding 2,048 tokens, "
            "like our server's longest prompt + answer) and gets the same requests from the same "
            "client as ours.",
            "",
        ]
    if w.get("requests_per_level"):
        levels = ", ".join(f"{count} requests at {level} stream{'s' if level > 1 else ''}"
                           for level, count in w["requests_per_level"].items())
        max_tokens = " or ".join(map(str, w["max_tokens_values"]))
        manager = ", ".join(map(str, p["manager_levels"])) or "none"
        lines += [
            f"Workload (seed {p['seed']}): SmolLM2-135M-Instruct, ours served at "
            f"`INFERENCE_DTYPE={p['precision']}`"
            + (f" with `INFERENCE_COMPILE={p['compile']}`" if p["compile"] else "")
            + f", the references at float32; greedy; prompts "
            f"of {w['prompt_tokens_min']}-{w['prompt_tokens_max']} tokens (about "
            f"{w['long_prompt_share']:.0%} long), max_tokens {max_tokens}; fixed concurrency, a new "
            f"request as soon as one ends: {levels}. Every system gets the same list at a given "
            "concurrency; tokens are counted as produced (an answer may stop early). "
            f"transformers' manager runs only at the levels its targets need ({manager}): at "
            "the others it carries no target and would push the run past 35 minutes. "
            f"The static batch takes the first B requests of that list, left-padded, and decodes "
            f"{p['static_steps']} steps counting B tokens per step. TTFT: sent to first token; "
            "ITL: gaps between one stream's tokens (SSE chunks for the servers); TPOT: (E2E - "
            "TTFT)/(tokens - 1). Other CPU: cores' worth of work by processes outside the "
            f"benchmark during that measurement (flagged ! above {DISTURBED_CORES}).",
            "",
        ]
    if w.get("cancel_sampling"):
        sampling = ", ".join(f"{k} {v}" for k, v in w["cancel_sampling"].items())
        lines += [f"Cancel check: {w['cancel_streams']} short prompts decoding together, sampled "
                  f"({sampling}, seeded per request) so that the answers run long; after "
                  f"{p['cancel_after_chunks']} chunks every other stream is cancelled.", ""]
    if w.get("multi_turn"):
        mt = w["multi_turn"]
        lines += [
            f"Multi-turn: {mt['conversations']} conversations side by side, {mt['turns']} turns "
            f"each; every user message {mt['user_message_tokens_min']}-"
            f"{mt['user_message_tokens_max']} tokens of new notes asking for a summary of "
            f"everything so far; max_tokens {p['turn_max_tokens']}, greedy. Each conversation "
            "resends its whole history every turn, as a chat client does, with that system's "
            "own answers in it. Ours runs with prefix reuse on (the default) and again in a "
            "fresh server with `INFERENCE_PREFIX_CACHE=0`; llama.cpp with a slot per "
            "conversation (its slots keep each conversation's prompt). Cached tokens: what the "
            "usage chunk's `prompt_tokens_details.cached_tokens` said, where the server reports it.",
            "",
        ]
    for run in results.runs:
        lines += [f"### {run.label}", ""]
        if run.levels:
            lines += markdown_table(COLUMNS, _rows(run)) + [""]
        peer_rows = llama_cpp_rows(run)
        if peer_rows:
            lines += [f"Ours against {peer_name(run)}, ratios from this run (same prompt tokens: "
                      "requests whose prompt llama.cpp counted as our tokenizer does; same "
                      "answer: identical greedy text):", ""]
            lines += markdown_table(peer_rows[0], peer_rows[1:]) + [""]
        turn_rows = multi_turn_rows(run)
        if turn_rows:
            lines += ["Multi-turn, TTFT p50 across conversations at each turn:", ""]
            lines += markdown_table(turn_rows[0], turn_rows[1:]) + [""]
        lines += ["Targets:", ""]
        lines += [target_line(t, markdown=True) for t in run.targets]
        caveats = caveat_lines(run)
        lines += ([""] + [f"**{line}**" for line in caveats] if caveats else []) + [""]
    lines.append("![Throughput and ITL against concurrency](benchmarks/inference.png)")
    return "\n".join(lines)
