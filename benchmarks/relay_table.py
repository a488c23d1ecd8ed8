"""The relay benchmark's table (relay_bench.py measures): a row per measurement, what bounds the
figures, the terminal's view and the BENCHMARKS.md section."""

from .machine_load import DISTURBED_CORES
from .report import cores, markdown_table, number, target_line, text_table, triple

ROWS = {  # figures' key -> the row's name, in the table's order
    "ttft direct": "TTFT, 1 stream: direct (stand-in)", "ttft through": "TTFT, 1 stream: daphne",
    "steady direct": "steady: direct", "steady through": "steady: daphne",
    "capacity direct": "capacity: direct (client and stand-in alone)",
    "capacity through": "capacity: 1 daphne",
    "capacity nginx 1": "capacity: nginx + 1 daphne", "capacity nginx 2": "capacity: nginx + 2 daphne",
}
COLUMNS = ["measurement", "ok/streams", "TTFT ms p50/p90/p99", "gap ms p50/p90/p99",
           "delivered tok/s", "events per token", "CPU cores daphne/stand-in/nginx/client",
           "daphne µs per token", "other CPU"]


def table_rows(figures: dict) -> list[list[str]]:
    rows = []
    for key, name in ROWS.items():
        f = figures.get(key)
        if f is None:
            continue
        cpu = f["cpu_cores"]
        rows.append([
            name, f"{f['ok']}/{f['streams']}", triple(f["ttft_s"]), triple(f["gap_s"]),
            number(f["delivered_tok_s"], ",.0f"), number(f["events_per_token"], ".2f"),
            "/".join(cores(cpu.get(k)) for k in ("daphne", "stand-in", "nginx", "client")),
            number(f["daphne_cpu_us_per_token"], ".0f"),
            cores(f["other_cores"]) + (" !" if (f["other_cores"] or 0.0) > DISTURBED_CORES else ""),
        ])
    return rows


def bounds(results: dict) -> list[str]:
    """What bounds the figures: the client's own ceiling, the inference HTTP layer's slot."""
    notes = []
    direct, offered = results["figures"].get("capacity direct"), results["offered_tok_s"]
    if direct and (direct["delivered_tok_s"] or 0) < 0.9 * offered:
        notes.append(f"The client and the stand-in alone delivered "
                     f"{number(direct['delivered_tok_s'], ',.0f')} of {offered:,.0f} tokens/s "
                     "offered: this machine cannot offer the full load, and the capacity "
                     "figures through daphne are bounded by that.")
    http = results.get("inference_http")
    notes.append("Inference service HTTP layer alone (benchmarks/inference_http.py): "
                 + ("N/A, not in this checkout." if not http else
                    ", ".join(f"{k} {v:,.1f}" if isinstance(v, float) else f"{k} {v}"
                              for k, v in http.items() if not isinstance(v, (dict, list)))))
    return notes


def terminal_lines(results: dict) -> list[str]:
    """The terminal's view of a relay run."""
    lines = ["", "=== relay benchmark ==="]
    lines += text_table(COLUMNS, table_rows(results["figures"])) + [""]
    lines += bounds(results) + [""]
    lines += [target_line(t) for t in results["targets"]]
    return lines + ["", f"command: {results['command']}"]


def section(results: dict) -> str:
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
    lines += markdown_table(COLUMNS, table_rows(results["figures"])) + [""]
    lines += bounds(results) + ["", "Targets:", ""]
    return "\n".join(lines + [target_line(t, markdown=True) for t in results["targets"]])
