"""The browser under a flood: 20,000 tokens streamed as fast as a stand-in upstream can send them.

Measured in headless Chromium (Debian's, driven by Playwright) through nginx and daphne:
paints per second while streaming, the longest main-thread task while streaming (the Long
Tasks API), and the time of the final Markdown render. Targets: no task over 50 ms while
streaming; final render under 200 ms.
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

from harness import web_stack
from harness.page_probes import CHROMIUM, CHROMIUM_ARGS, FRAME_PROBE, send, wait_for_end

from . import relay_stack, report

SECTION = "browser"
LONG_TASK_LIMIT_MS = 50
FINAL_RENDER_LIMIT_MS = 200


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tokens", type=int, default=20_000, help="streamed chunks (default 20000)")
    parser.add_argument("--quick", action="store_true", help="2,000 tokens, for a smoke run")
    report.add_publish_arguments(parser, "the BENCHMARKS.md section")


def run(args: argparse.Namespace) -> int:
    from playwright.sync_api import sync_playwright

    tokens = 2_000 if args.quick else args.tokens
    with tempfile.TemporaryDirectory() as tmp, \
            relay_stack.started(relay_stack.stand_in(interval_ms=0, first_token_ms=0)) as upstream:
        env = {**relay_stack.app_env(f"sqlite:///{Path(tmp) / 'bench.sqlite3'}",
                                     relay_stack.base_url(upstream), answer_tokens=tokens),
               "CHAT_MAX_STREAMS_PER_USER": "2"}
        relay_stack.prepare_database(env)
        with web_stack.nginx_and_daphne(env, Path(tmp)) as base_url, sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            page = browser.new_page(viewport={"width": 1200, "height": 800})
            page.add_init_script(FRAME_PROBE)
            page.goto(base_url + "/")
            page.fill("#login-form [name=username]", relay_stack.USERNAME)
            page.fill("#login-form [name=password]", relay_stack.PASSWORD)
            page.click("#login-form [type=submit]")
            page.wait_for_selector("#composer")
            page.evaluate("window.__tasks = []; new PerformanceObserver(l => l.getEntries().forEach("
                          "e => window.__tasks.push([e.startTime, e.duration]))).observe({type: 'longtask'});")
            started = page.evaluate("performance.now()")
            send(page, "flood")
            wait_for_end(page, timeout_ms=600_000)
            figures = page.evaluate("""() => ({
                paints: window.chatappStats.paints, frames: window.__frames,
                finalRenderMs: window.chatappStats.finalRenderMs, now: performance.now(),
                tasks: window.__tasks,
                chars: document.querySelector('#messages .message[data-role="assistant"]:last-of-type .message-content').textContent.length,
            })""")
            browser.close()
    return _report(args, tokens, started, figures)


def _report(args, tokens: int, started: float, figures: dict) -> int:
    render_start = figures["now"] - (figures["finalRenderMs"] or 0)
    streaming_s = max((render_start - started) / 1000, 1e-9)
    # Tasks that ended before the final render began ran while the answer streamed.
    streaming_tasks = [d for s, d in figures["tasks"] if s + d <= render_start]
    longest = max(streaming_tasks, default=0.0)
    rows = {
        "tokens streamed": f"{tokens}",
        "streaming time": f"{streaming_s:.2f} s",
        "paints / animation frames": f"{figures['paints']} / {figures['frames']}",
        "paints per second": f"{figures['paints'] / streaming_s:.1f}",
        "longest main-thread task while streaming": f"{longest:.0f} ms ({len(streaming_tasks)} tasks over 50 ms)",
        "final Markdown render": f"{figures['finalRenderMs']:.0f} ms",
    }
    targets = [
        (longest <= LONG_TASK_LIMIT_MS, f"no task over {LONG_TASK_LIMIT_MS} ms while streaming: longest {longest:.0f} ms"),
        (figures["finalRenderMs"] < FINAL_RENDER_LIMIT_MS,
         f"final render under {FINAL_RENDER_LIMIT_MS} ms: {figures['finalRenderMs']:.0f} ms"),
        (figures["paints"] <= figures["frames"], f"at most one paint per frame: {figures['paints']} paints, {figures['frames']} frames"),
    ]
    lines = [f"| {name} | {value} |" for name, value in rows.items()]
    verdicts = [f"- **{'PASS' if ok else 'FAIL'}** {text}" for ok, text in targets]
    print("\n".join(lines + verdicts))
    print(f"command: {args.command}")
    if report.publishing(args, args.quick):
        section = "\n".join([
            "## Browser under a 20,000-token flood", "",
            f"Command: `{args.command}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}).", "",
            "Headless Debian Chromium through nginx and daphne; the stand-in upstream "
            "(benchmarks/relay_upstream.py) sends the chunks with no pause; the load, the servers and "
            "the browser share the machine's 2 cores.", "",
            "| measure | value |", "|---|---|", *lines, "", *verdicts,
        ])
        report.write_section(SECTION, section)
    print(json.dumps({"figures": {k: v for k, v in figures.items() if k != "tasks"}, "longest_task_ms": longest}))
    return 0
