"""Stop strings on the step thread: what following them costs each token as an answer grows
(inference/engine/detokenizer.py, `StopSearch`), against a plain search at every token, the
way it was done before (a `find` from the text not yet sent, then the longest start of each
stop string the text ends with, tried size by size), timed in the same run.

The engine's detokenizer runs on the one thread that steps every request, so what a request's
stop strings cost there, each token, every request waits for. One character a token, `--tokens`
of them; the figure is the median time of a token added over the last `--timed` tokens. The
cases: one `\\n\\n`; four of the longest allowed (1,024 characters) that never occur, the worst
case for a search that tries each size; and four whose start the text keeps repeating, the worst
for following them.
"""

import argparse
import statistics
import time

from . import report
from .machine import web_notes

SECTION = "stop-strings"
LONGEST = 1024  # inference/protocol.py MAX_STOP_CHARS
TARGET_RATIO = 0.1  # ours at most a tenth of the plain search's cost in the worst case


class PlainSearch:
    """The earlier way: each token, a search of the held-back text and, size by size, the
    longest start of each stop string that the text ends with."""

    def __init__(self, stops: list[str]):
        self.stops, self.text, self.emitted = stops, "", 0

    def add(self, new: str) -> None:
        self.text += new
        if any(self.text.find(stop, self.emitted) >= 0 for stop in self.stops):
            return
        held = 0
        for stop in self.stops:
            for size in range(min(len(stop) - 1, len(self.text)), held, -1):
                if self.text.endswith(stop[:size]):
                    held = size
                    break
        self.emitted = len(self.text) - held


class Ours:
    """The detokenizer's way: each stop string followed character by character (StopSearch),
    the text held back the longest start of one that it ends with."""

    def __init__(self, stops: list[str]):
        from inference.engine.detokenizer import StopSearch

        self.searches, self.text, self.emitted = [StopSearch(stop) for stop in stops], "", 0

    def add(self, new: str) -> None:
        start = len(self.text)
        self.text += new
        for search in self.searches:
            search.follow(self.text, start)
        self.emitted = len(self.text) - max((search.matched for search in self.searches), default=0)


NEVER_MET = f"four of {LONGEST:,} characters, never met"
CASES = {
    "one `\\n\\n`": ["\n\n"],
    NEVER_MET: ["~" * LONGEST] * 4,
    f"four of {LONGEST:,} characters, their start the text's own": ["a" * (LONGEST - 1) + "~"] * 4,
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tokens", type=int, default=2000, help="answer length in tokens (default 2000)")
    parser.add_argument("--timed", type=int, default=200, help="last tokens timed (default 200)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 200 tokens, 50 timed")
    report.add_publish_arguments(parser, "the BENCHMARKS.md section")


def per_token_us(follower, tokens: int, timed: int) -> float:
    """Median microseconds a token of the last `timed` of `tokens`, one character each."""
    times = []
    for n in range(tokens):
        began = time.perf_counter()
        follower.add("a")
        if n >= tokens - timed:
            times.append((time.perf_counter() - began) * 1e6)
    return statistics.median(times)


def run(args: argparse.Namespace) -> int:
    if args.quick:
        args.tokens, args.timed = 200, 50
    rows, ratios = [], {}
    for name, stops in CASES.items():
        ours = per_token_us(Ours(stops), args.tokens, args.timed)
        plain = per_token_us(PlainSearch(stops), args.tokens, args.timed)
        ratios[name] = ours / plain
        rows.append(f"| {name} | {ours:.1f} | {plain:.1f} | {ours / plain:.3f}x |")
    ok = ratios[NEVER_MET] <= TARGET_RATIO
    verdict = (f"- **{'PASS' if ok else 'FAIL'}** long stop strings that never occur (the plain "
               f"search's worst case) cost ours at most {TARGET_RATIO}x its time: "
               f"{ratios[NEVER_MET]:.3f}x")
    table = ["| stop strings | ours, µs a token | plain search, µs a token | ours / plain |",
             "|---|---|---|---|", *rows]
    print("\n".join(table + [verdict]))
    print(f"command: {args.command}")
    if report.publishing(args, args.tokens != 2000):
        machine = web_notes()
        report.write_section(SECTION, "\n".join([
            "## Stop strings on the step thread", "",
            f"Command: `{args.command}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
            f"commit {machine['commit']}). Machine: {machine['cpu']}.", "",
            f"A token's cost of following a request's stop strings at the end of a {args.tokens:,}-"
            "token answer (one character a token; the median of the last "
            f"{args.timed}), ours (Knuth-Morris-Pratt as the text grows, "
            "inference/engine/detokenizer.py) against a plain search at every token, in the same "
            "run. It runs on the thread that steps every request.", "",
            *table, "", verdict,
        ]))
    return 0 if ok else 1
