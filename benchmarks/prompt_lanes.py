"""A short question beside long prompts being encoded: how long the inference service keeps it
waiting, against the same question alone in the same run (inference/service.py's two lanes).

Starts the inference service (the default model, F32, no compiled step: one token is asked
for, and a prompt refused as too long is never fed), then, `--rounds` times each: a one-token
question alone; the same question sent 0.05 s after one long prompt (`--long-chars` characters
in one message, refused as longer than the context once encoded); and sent 0.05 s after eight
such prompts at once. The service's resident memory is read every 0.1 s through the flood.
"""

import argparse
import asyncio
import json
import os
import statistics
import time

import httpx2

from . import report
from .server_process import ServerProcess

SECTION = "prompt-lanes"
FLOOD = 8
TARGET_RATIO = 3.0  # beside one long prompt, at most this many times the question alone
DELAY_S = 0.05  # the long prompts' bodies are on their way first


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=5, help="tries of each case (default 5)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: one try of each case")
    parser.add_argument("--long-chars", type=int, default=918_000,
                        help="characters of each long prompt (default 918,000: under the 1 MiB "
                             "body cap)")
    report.add_publish_arguments(parser, "the BENCHMARKS.md section")


def run(args: argparse.Namespace) -> int:
    if args.quick:
        args.rounds = 1
    server = ServerProcess({"INFERENCE_DTYPE": "float32", "INFERENCE_COMPILE": "off"})
    try:
        server.start()
        figures = asyncio.run(_measure(server, args))
    finally:
        server.close()
    return _report(args, figures)


async def _measure(server: ServerProcess, args) -> dict:
    url = f"{server.base_url}/v1/chat/completions"
    words = "many words here and there, "
    long_text = (words * (args.long_chars // len(words) + 1))[:args.long_chars]
    long_body = {"model": server.model_name, "max_tokens": 1,
                 "messages": [{"role": "user", "content": long_text}]}
    short_body = {"model": server.model_name, "max_tokens": 1,
                  "messages": [{"role": "user", "content": "Hi"}]}
    figures: dict[str, list[float]] = {"alone_s": [], "beside_one_s": [], "beside_flood_s": []}
    peak_bytes = 0
    async with httpx2.AsyncClient(timeout=120) as client:
        async def short() -> float:
            began = time.perf_counter()
            response = await client.post(url, json=short_body)
            assert response.status_code == 200, response.text
            return time.perf_counter() - began

        async def beside(count: int) -> float:
            longs = [asyncio.ensure_future(client.post(url, json=long_body)) for _ in range(count)]
            await asyncio.sleep(DELAY_S)
            waited = await short()
            refused = await asyncio.gather(*longs)
            assert {response.status_code for response in refused} == {400}
            return waited

        # One-time costs: the first request's, and each lane's first thread copying the tokenizer.
        await short()
        await client.post(url, json=long_body)
        for _ in range(args.rounds):
            figures["alone_s"].append(await short())
            figures["beside_one_s"].append(await beside(1))
            flood = asyncio.ensure_future(beside(FLOOD))
            while not flood.done():
                peak_bytes = max(peak_bytes, server.rss_bytes() or 0)
                await asyncio.sleep(0.1)
            figures["beside_flood_s"].append(flood.result())
    return {**figures, "flood_peak_mib": peak_bytes / 2**20}


def _report(args, figures: dict) -> int:
    alone = statistics.median(figures["alone_s"])
    one = statistics.median(figures["beside_one_s"])
    flood = statistics.median(figures["beside_flood_s"])
    rows = [["the question alone", report.ms(alone), "1.0x"],
            ["sent beside one long prompt", report.ms(one), f"{one / alone:.1f}x"],
            [f"sent beside {FLOOD} long prompts at once", report.ms(flood),
             f"{flood / alone:.1f}x"]]
    header = ["a one-token question (p50)", "answered in (ms)", "against alone"]
    ok = one <= TARGET_RATIO * alone
    verdict = (f"- **{'PASS' if ok else 'FAIL'}** beside one long prompt within "
               f"{TARGET_RATIO:.0f}x "
               f"the question alone: {one / alone:.1f}x")
    memory = ("The service's peak resident memory through the floods: "
              f"{figures['flood_peak_mib']:,.0f} MiB.")
    print("\n".join(report.text_table(header, rows) + [verdict, memory]))
    print(f"command: {args.command}")
    if report.publishing(args, args.rounds < 5):
        report.write_section(SECTION, "\n".join([
            "## A short question beside long prompts being encoded", "",
            f"Command: `{args.command}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
            f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end).", "",
            "The inference service encodes prompts off its event loop in two lanes by their "
            "characters (inference/service.py): long ones (65,536 and more) one at a time, shorter "
            f"ones on two threads of their own. Each long prompt here is {args.long_chars:,} "
            "characters in one message (refused once encoded: longer than the context); the "
            f"question is sent {DELAY_S} s after them; {args.rounds} tries of each case, F32.", "",
            *report.markdown_table(header, rows), "", verdict, "", memory,
        ]))
    print(json.dumps(figures))
    return 0 if ok else 1
