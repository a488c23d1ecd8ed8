"""What a run leaves behind: the printed table, the results JSON, the plot, a BENCHMARKS.md section.

The section is rewritten between its own markers only, so other benchmarks can keep theirs in
the same file.
"""

import json
import os
import platform
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .machine_load import DISTURBED_CORES

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
PLOT_PATH = BENCH_DIR / "inference.png"
MARKDOWN_PATH = REPO_ROOT / "BENCHMARKS.md"

OURS, OURS_NO_REUSE = "ours", "ours-no-reuse"


def llama_cpp_system(outtype: str) -> str:
    return f"llama.cpp-{outtype}"


LLAMA_CPP_F32 = llama_cpp_system("f32")
SYSTEM_ORDER = {"hf-generate": 0, OURS: 1, OURS_NO_REUSE: 2, LLAMA_CPP_F32: 3,
                llama_cpp_system("f16"): 4, llama_cpp_system("q8_0"): 5, "hf-manager": 6,
                "static-batch": 7}
SYSTEM_NAMES = {
    OURS: "ours (HTTP/SSE)",
    OURS_NO_REUSE: "ours, prefix reuse off (HTTP/SSE)",
    LLAMA_CPP_F32: "llama.cpp F32 (HTTP/SSE)",
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


# --- formatting ---
def ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1000:.0f}" if seconds >= 0.1 else f"{seconds * 1000:.1f}"


def _ms_or_none(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def _triple(spread: dict) -> str:
    return "/".join(ms(spread.get(k)) for k in ("p50", "p90", "p99"))


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
            _triple(s["ttft_s"]), _triple(s["itl_s"]), _triple(s["tpot_s"]),
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


def llama_cpp_rows(run) -> list[list[str]]:
    """Ours against llama.cpp F32 at each level, as ratios; empty when either is missing."""
    rows = []
    for level in sorted({l.concurrency for l in run.levels}):
        ours, peer = run.find(OURS, level), run.find(LLAMA_CPP_F32, level)
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
    return [["streams", "ours tok/s (ITL p50)", "llama.cpp F32 tok/s (ITL p50)",
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


def text_table(header: list[str], body: list[list[str]]) -> list[str]:
    rows = [header] + body
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for index, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    return lines


def markdown_table(header: list[str], body: list[list[str]]) -> list[str]:
    return (["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
            + ["| " + " | ".join(row) + " |" for row in body])


def cores(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


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


def _verdict(target: dict) -> str:
    return {True: "PASS", False: "FAIL", None: "N/A "}[target["passed"]]


def target_lines(run) -> list[str]:
    return [target_line(t) for t in run.targets]


# --- the terminal ---
def print_results(results: Results) -> None:
    for run in results.runs:
        print(f"\n=== inference benchmark, {run.label} ===")
        if run.levels:
            print("\n".join(text_table(COLUMNS, _rows(run))))
        for title, rows in ((f"ours / llama.cpp F32", llama_cpp_rows(run)),
                            ("multi-turn", multi_turn_rows(run))):
            if rows:
                print(f"\n{title}:\n" + "\n".join(text_table(rows[0], rows[1:])))
        print()
        for line in target_lines(run) + caveat_lines(run):
            print(line)
    print(f"\ncommand: {results.command}")


# --- files ---
def write_json(results: Results) -> Path:
    return write_results("inference", results.to_json(), results.started)


def write_plot(results: Results, path: Path = PLOT_PATH) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    runs = results.runs
    figure, axes = plt.subplots(len(runs), 2, figsize=(11, 4 * len(runs)), squeeze=False)
    styles = {OURS: ("tab:blue", "o"), LLAMA_CPP_F32: ("tab:red", "v"),
              llama_cpp_system("f16"): ("tab:purple", "P"),
              llama_cpp_system("q8_0"): ("tab:brown", "X"), "hf-manager": ("tab:orange", "s"),
              "static-batch": ("tab:green", "^"), "hf-generate": ("tab:gray", "D")}
    for row, run in zip(axes, runs):
        throughput, latency = row
        for system in styles:
            levels = sorted((l for l in run.levels if l.system == system),
                            key=lambda l: l.concurrency)
            if not levels:
                continue
            color, marker = styles[system]
            x = [l.concurrency for l in levels]
            summaries = [l.summary() for l in levels]
            p50 = [_ms_or_none(s["itl_s"]["p50"]) for s in summaries]
            p99 = [_ms_or_none(s["itl_s"]["p99"]) for s in summaries]
            if system == "hf-generate":  # one request at a time: a level, not a curve
                throughput.axhline(summaries[0]["output_tokens_per_s"], color=color, linestyle=":",
                                   label=SYSTEM_NAMES[system])
            else:
                throughput.plot(x, [s["output_tokens_per_s"] for s in summaries], marker=marker,
                                color=color, label=SYSTEM_NAMES[system])
            latency.plot(x, p50, marker=marker, color=color, label=SYSTEM_NAMES[system])
            latency.plot(x, p99, marker=marker, color=color, linestyle="--", alpha=0.7)
        concurrencies = sorted({l.concurrency for l in run.levels})
        for axis in row:
            axis.set_xscale("log", base=2)
            axis.set_xticks(concurrencies, [str(c) for c in concurrencies])
            axis.set_xlabel("concurrent streams (static batch: batch size)")
            axis.grid(True, alpha=0.3)
        throughput.set_ylabel("output tokens/s")
        throughput.set_title(f"{run.label}: aggregate output throughput")
        latency.set_yscale("log")
        latency.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1, 2, 5)))
        latency.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        latency.yaxis.set_minor_formatter(ticker.NullFormatter())
        latency.set_ylabel("inter-token latency, ms")
        latency.set_title(f"{run.label}: ITL p50 (solid) and p99 (dashed)")
        throughput.legend(fontsize=8)
        latency.legend(fontsize=7)
    mode = "QUICK smoke run, not representative" if results.plan.get("quick") else "full run"
    figure.suptitle(f"SmolLM2-135M-Instruct fp32, {results.plan['threads']} threads, {mode}",
                    fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)
    # The plot is committed: a 256-colour palette makes it about three times smaller, same look.
    from PIL import Image

    with Image.open(path) as image:
        image.convert("RGB").quantize(colors=256).save(path, optimize=True)
    return path


def add_publish_arguments(parser, writes: str) -> None:
    """--publish / --no-publish; unset means publish, except in a quick or partial run."""
    publish = parser.add_mutually_exclusive_group()
    publish.add_argument("--publish", dest="publish", action="store_true", default=None,
                         help=f"write {writes} (the default, except in a quick run or one that "
                              "leaves a part out)")
    publish.add_argument("--no-publish", dest="publish", action="store_false",
                         help="write the results JSON only")


def levels_with_counts(levels_arg: str | None, counts_arg: str | None, counts_name: str,
                       known: dict[int, int], default) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """--levels with one count per level (--requests, --rounds): the counts given, else each
    level's count from `known`, else `default(level)`; None when --levels is absent."""
    if not levels_arg:
        if counts_arg:
            raise SystemExit(f"--{counts_name} goes with --levels")
        return None
    levels = tuple(int(x) for x in levels_arg.split(","))
    counts = (tuple(int(x) for x in counts_arg.split(",")) if counts_arg
              else tuple(known.get(level, default(level)) for level in levels))
    if len(counts) != len(levels):
        raise SystemExit(f"--{counts_name} needs one count per --levels entry")
    return levels, counts


def publishing(args, is_sample: bool) -> bool:
    """Whether to publish: as asked, else only a full run (`is_sample`: quick or partial)."""
    return (not is_sample) if args.publish is None else args.publish


def write_markdown(results: Results, path: Path = MARKDOWN_PATH) -> Path:
    return write_section("inference", render_section(results), path)


def write_section(name: str, body: str, path: Path = MARKDOWN_PATH) -> Path:
    """Rewrites one benchmark's section of BENCHMARKS.md, between its own markers."""
    start_marker, end_marker = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    section = f"{start_marker}\n{body}\n{end_marker}"
    if path.exists():
        text = path.read_text()
        start, end = text.find(start_marker), text.find(end_marker)
        if start != -1 and end > start:
            text = text[:start] + section + text[end + len(end_marker):]
        else:
            text = text.rstrip("\n") + "\n\n" + section + "\n"
    else:
        text = ("# Benchmarks\n\n`make bench` runs every benchmark; each one rewrites only its own "
                "section below, between its markers, and states the command that produced it.\n\n"
                + section + "\n")
    path.write_text(text)
    return path


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
        "systems ever run at the same time.",
        "",
    ]
    if m.get("llama_cpp"):
        lines += [
            f"llama.cpp: `llama-server` from the {m['llama_cpp']} sdist (its vendored llama.cpp, "
            "built here with `GGML_NATIVE=ON`), serving the same weights converted to an F32 "
            "GGUF by its own `convert_hf_to_gguf.py`; the chat template and vocabulary come from "
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
            f"Workload (seed {p['seed']}): SmolLM2-135M-Instruct converted to fp32, greedy; prompts "
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
            lines += ["Ours against llama.cpp F32, ratios from this run (same prompt tokens: "
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


def machine_notes(threads: int) -> dict:
    import torch
    import transformers

    notes = {
        "cpu": _cpu_model(), "cores": os.cpu_count(), "memory_gb": _memory_gb(),
        "python": platform.python_version(), "torch": torch.__version__,
        "transformers": transformers.__version__, "threads": threads,
        "load_average": ", ".join(f"{x:.2f}" for x in os.getloadavg()),
        "commit": _commit(), "gpu": None,
    }
    if torch.cuda.is_available():
        notes["gpu"] = torch.cuda.get_device_name(0)
    return notes


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _memory_gb() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024 / 1e9
    except OSError:
        pass
    return 0.0


def _commit() -> str:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT,
                                capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip()
        return commit + (" with uncommitted changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M %Z", time.localtime(seconds))


def target_line(target: dict, markdown: bool = False) -> str:
    verdict = _verdict(target)
    if markdown:
        return f"- **{verdict.strip()}** {target['name']}: {target['detail']}"
    return f"{verdict} {target['name']}: {target['detail']}"


def write_results(name: str, data: dict, started: float) -> Path:
    """The results JSON of one run, named for the benchmark and its start."""
    RESULTS_DIR.mkdir(exist_ok=True)
    path = RESULTS_DIR / f"{name}-{time.strftime('%Y%m%d-%H%M%S', time.localtime(started))}.json"
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


# --- the relay (relay_bench.py) ---
RELAY_ROWS = {  # figures' key -> the row's name, in the table's order
    "ttft direct": "TTFT, 1 stream: direct (stand-in)", "ttft through": "TTFT, 1 stream: daphne",
    "steady direct": "steady: direct", "steady through": "steady: daphne",
    "capacity direct": "capacity: direct (client and stand-in alone)",
    "capacity through": "capacity: 1 daphne",
    "capacity nginx 1": "capacity: nginx + 1 daphne", "capacity nginx 2": "capacity: nginx + 2 daphne",
}
RELAY_COLUMNS = ["measurement", "ok/streams", "TTFT ms p50/p90/p99", "gap ms p50/p90/p99",
                 "delivered tok/s", "events per token", "CPU cores daphne/stand-in/nginx/client",
                 "daphne µs per token", "other CPU"]


def relay_rows(figures: dict) -> list[list[str]]:
    rows = []
    for key, name in RELAY_ROWS.items():
        f = figures.get(key)
        if f is None:
            continue
        cpu = f["cpu_cores"]
        rows.append([
            name, f"{f['ok']}/{f['streams']}", _triple(f["ttft_s"]), _triple(f["gap_s"]),
            _number(f["delivered_tok_s"], ",.0f"), _number(f["events_per_token"], ".2f"),
            "/".join(cores(cpu.get(k)) for k in ("daphne", "stand-in", "nginx", "client")),
            _number(f["daphne_cpu_us_per_token"], ".0f"),
            cores(f["other_cores"]) + (" !" if (f["other_cores"] or 0.0) > DISTURBED_CORES else ""),
        ])
    return rows


def _number(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def relay_notes(results: dict) -> list[str]:
    """What bounds the figures: the client's own ceiling, the inference HTTP layer's slot."""
    notes = []
    direct, offered = results["figures"].get("capacity direct"), results["offered_tok_s"]
    if direct and (direct["delivered_tok_s"] or 0) < 0.9 * offered:
        notes.append(f"The client and the stand-in alone delivered "
                     f"{_number(direct['delivered_tok_s'], ',.0f')} of {offered:,.0f} tokens/s "
                     "offered: this machine cannot offer the full load, and the capacity "
                     "figures through daphne are bounded by that.")
    http = results.get("inference_http")
    notes.append("Inference service HTTP layer alone (benchmarks/inference_http.py): "
                 + ("N/A, not in this checkout." if not http else
                    ", ".join(f"{k} {v:,.1f}" if isinstance(v, float) else f"{k} {v}"
                              for k, v in http.items() if not isinstance(v, (dict, list)))))
    return notes


def relay_lines(results: dict) -> list[str]:
    """The terminal's view of a relay run."""
    lines = ["", "=== relay benchmark ==="]
    lines += text_table(RELAY_COLUMNS, relay_rows(results["figures"])) + [""]
    lines += relay_notes(results) + [""]
    lines += [target_line(t) for t in results["targets"]]
    return lines + ["", f"command: {results['command']}"]


def relay_machine() -> dict:
    from importlib.metadata import version

    return {"cpu": _cpu_model(), "cores": os.cpu_count(), "memory_gb": _memory_gb(),
            "python": platform.python_version(), "django": version("django"),
            "daphne": version("daphne"), "load_average": ", ".join(
                f"{x:.2f}" for x in os.getloadavg()), "commit": _commit()}


def relay_section(results: dict) -> str:
    m, p = results["machine"], results["plan"]
    lines = ["## Relay (daphne)", ""]
    if p["quick"]:
        lines += ["**A sample run (quick or resized), not representative: run the command without "
                  "options for the real figures.**", ""]
    lines += [
        f"Command: `{results['command']}` (started {results['started']}, "
        f"{results['duration_s'] / 60:.1f} min, commit {m['commit']}).",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gb']:.0f} GB RAM; Python "
        f"{m['python']}, Django {m['django']}, daphne {m['daphne']}; load average at start "
        f"{m['load_average']}. The load generator (one Python process), the stand-in upstream, "
        "nginx and daphne share these cores.",
        "",
        f"Workload: the stand-in upstream (benchmarks/relay_upstream.py) answers every request "
        f"with tokens of 5 characters, the first after {p['first_token_ms']:g} ms (a small "
        f"model's prefill), then one every {p['interval_ms']:g} ms. TTFT: {p['ttft_rounds']} "
        f"rounds of 1 stream of {p['ttft_tokens']} tokens each path, the paths alternating; "
        f"steady: {p['steady_rounds']} round(s) of {p['steady_streams']} streams of "
        f"{p['answer_tokens']} tokens each path, alternating, from a second stand-in with a "
        f"token every {p['steady_interval_ms']:g} ms, the streams starting "
        f"{p['steady_stagger_ms']:g} ms apart ({results['steady_offered_tok_s']:,.0f} tokens/s "
        f"offered once all flow); capacity: 1 round of {p['capacity_streams']} streams of "
        f"{p['answer_tokens']} tokens ({results['offered_tok_s']:,.0f} tokens/s offered once "
        "all flow), direct, through one daphne process, and through nginx (the project's "
        "config, an upstream block of "
        f"{' and '.join(map(str, p['web_processes']))} daphne process(es)). All other rounds' "
        "streams start together; each stream has a keep-alive connection opened before. "
        "*Direct*: POST "
        "/v1/chat/completions on the stand-in; *daphne*: POST /api/conversations/<id>/messages "
        "(`chatapp.asgi:application`, a signed-in user, a fresh conversation per stream, "
        "in-memory channel layer). Tokens are counted from the text (a relay may merge several "
        "into one event); a stream is an error unless it ends properly with exactly the "
        "stand-in's text. Gap: between two events of a stream that carried text; events per "
        "token: those events over the tokens (below 1 where a hop merged tokens). Delivered "
        "tokens/s: tokens received over the time from the first token to the last. CPU: "
        "cores' worth of each process over the rounds (/proc/<pid>/stat); daphne µs per "
        "token: daphne's CPU over the tokens it relayed, starts included; other CPU: "
        f"processes outside the benchmark (flagged ! above {DISTURBED_CORES}).",
        "",
    ]
    lines += markdown_table(RELAY_COLUMNS, relay_rows(results["figures"])) + [""]
    lines += relay_notes(results) + ["", "Targets:", ""]
    return "\n".join(lines + [target_line(t, markdown=True) for t in results["targets"]])
