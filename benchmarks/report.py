"""What every benchmark writes the same way: figures formatted for a table, the results JSON, its
own section of BENCHMARKS.md (rewritten between its markers only, so the others keep theirs),
the targets' verdicts, and the --publish switch. Each benchmark's table is its own, next to its
measurement (inference_table.py, relay_table.py, ...)."""

import json
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
MARKDOWN_PATH = REPO_ROOT / "BENCHMARKS.md"


# --- formatting ---
def ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1000:.0f}" if seconds >= 0.1 else f"{seconds * 1000:.1f}"


def triple(spread: dict) -> str:
    return "/".join(ms(spread.get(k)) for k in ("p50", "p90", "p99"))


def cores(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def number(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


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


def stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M %Z", time.localtime(seconds))


def _verdict(target: dict) -> str:
    return {True: "PASS", False: "FAIL", None: "N/A "}[target["passed"]]


def target_line(target: dict, markdown: bool = False) -> str:
    verdict = _verdict(target)
    if markdown:
        return f"- **{verdict.strip()}** {target['name']}: {target['detail']}"
    return f"{verdict} {target['name']}: {target['detail']}"


# --- files ---
def write_results(name: str, data: dict, started: float) -> Path:
    """The results JSON of one run, named for the benchmark and its start."""
    RESULTS_DIR.mkdir(exist_ok=True)
    path = RESULTS_DIR / f"{name}-{time.strftime('%Y%m%d-%H%M%S', time.localtime(started))}.json"
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


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


def add_publish_arguments(parser, writes: str) -> None:
    """--publish / --no-publish; unset means publish, except in a quick or partial run."""
    publish = parser.add_mutually_exclusive_group()
    publish.add_argument("--publish", dest="publish", action="store_true", default=None,
                         help=f"write {writes} (the default, except in a quick run or one that "
                              "leaves a part out)")
    publish.add_argument("--no-publish", dest="publish", action="store_false",
                         help="write the results JSON only")


def publishing(args, is_sample: bool) -> bool:
    """Whether to publish: as asked, else only a full run (`is_sample`: quick or partial)."""
    return (not is_sample) if args.publish is None else args.publish


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
