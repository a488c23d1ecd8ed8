"""RELIABILITY.md: the soak's verdicts as its `## Soak` section, and every suite's section writer."""

from dataclasses import dataclass
from pathlib import Path

from benchmarks import report
from benchmarks.machine import inference_notes
from harness.child_process import REPO_DIR

RELIABILITY_PATH = REPO_DIR / "RELIABILITY.md"
RELIABILITY_HEADER = ("# Reliability\n\nThe project's own proof, kept and runnable: each suite is one "
                      "command, rewrites only its own section below, and states how it was run.\n")


@dataclass
class Criterion:
    name: str
    is_passed: bool
    detail: str


def _mib(value: float) -> str:
    return f"{value / 2**20:.0f} MiB"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def _stack_shape(figures: dict) -> str:
    """What runs beside daphne, and on what (stack/__main__.py decides from the same settings)."""
    if figures["with_redis"]:
        return f"a Celery worker, nginx) on {figures['database']} and Redis"
    return f"the in-process reaper, nginx) on {figures['database']} without Redis"


def render_soak(command: str, plan, figures: dict, criteria: list[Criterion]) -> str:
    machine = inference_notes(threads=0)
    answers, stored = figures["answers"], figures["stored"]
    minutes = (figures["finished_at"] - figures["started_at"]) / 60
    excess = stored.closed_excess_chars
    lines = [
        "## Soak", "",
        f"Command: `{command}` (`make soak`; started {report.stamp(figures['started_at'])}, "
        f"{minutes:.1f} min with start-up and checks, commit {machine['commit']}).", "",
        f"Machine: {machine['cpu']}, {machine['cores']} cores, {machine['memory_gb']:.0f} GB RAM, "
        f"{'GPU ' + machine['gpu'] if machine['gpu'] else 'no GPU'}; load average at the end "
        f"{machine['load_average']}. Other processes took {report.cores(figures['other_cpu_cores'])} "
        "cores' worth of CPU during the load: the machine is shared with other engineers' test runs, "
        "so it was slower than when alone, and the load generator runs on it too.", "",
        f"Load: {plan.concurrency} concurrent answers for {plan.minutes:g} min (after {plan.warmup_minutes:g} "
        f"min of the same load as a warm-up, whose answers are checked but whose resources are not "
        f"sampled) across {plan.users} users "
        f"(seed {plan.seed}), the whole stack (`python -m stack`: inference with the real model, daphne, "
        f"{_stack_shape(figures)}, every request through nginx. Each question "
        f"goes to a new conversation; answers are capped at CHAT_MAX_TOKENS={plan.max_tokens} so that "
        f"they turn over. {plan.cancel_share:.0%} are cancelled at a random point (0-{plan.max_cancel_chars} "
        "code points in), half by closing the stream, half by Stop with the length seen and then closing.", "",
        "| figure | value |", "|---|---|",
        f"| answers | {answers['answers']} in {figures['wall_s'] / 60:.1f} min |",
        f"| planned endings | {_pairs(answers['planned'])} |",
        f"| outcomes seen by the clients | {_pairs(answers['outcomes'])} |",
        f"| Stops that found the answer already ended (409, read to the end) | {answers['late_stops']} |",
        f"| 429 (the user's previous answer not yet ended), retried after 0.5-1.5 s | {figures['busy_retries']} |",
        f"| first token, p50 / p90 / max | {_seconds(answers['ttft_s']['p50'])} / "
        f"{_seconds(answers['ttft_s']['p90'])} / {_seconds(answers['ttft_s']['max'])} |",
        f"| first token after more than 10 s | {answers['slow_first_tokens']} answers |",
        f"| stored rows by (client outcome, status, cancelled_by) | "
        f"{'; '.join(f'{k[0]}/{k[1]}/{k[2]}: {v}' for k, v in sorted(stored.statuses.items()))} |",
        f"| closed streams: stored text beyond what the client read (in flight) | "
        f"{sum(1 for e in excess if e > 0)} of {len(excess)} had some; max {max(excess, default=0)} code points |",
        "",
        "Closed streams are checked for the stored text *starting with* what the client read: the "
        "server keeps what it sent, and bytes in flight when the client closed were never read.", "",
        f"Growth: each figure's mean over the first {figures['growth_window_s']:.0f} s of the measured load "
        f"against the last {figures['growth_window_s']:.0f} s ({figures['samples']} samples, every "
        f"{plan.sample_interval_s:g} s from {plan.warmup_minutes * 60 + plan.sample_interval_s:g} s after "
        "every client had its first request open, to the end of the load, before the drain; a role counts its child "
        "processes; Redis clients are those on the stack's own index). Tolerance: RSS +10% "
        "(allocators and caches settle; a leak of a few KB per answer over thousands of answers "
        "exceeds it); file descriptors +5 or +5%, connections +5 (counts of things held per "
        "open stream, which move by a few as streams come and go).", "",
        "| figure | first | last | within |", "|---|---|---|---|",
    ]
    for g in figures["growth"]:
        show = _mib if g.name.startswith("rss") else (lambda v: f"{v:.1f}")
        lines.append(f"| {g.name} | {show(g.first)} | {show(g.last)} | {'yes' if g.is_within else '**no**'} |")
    lines += ["", "Verdicts:", ""]
    lines += [f"- **{'PASS' if c.is_passed else 'FAIL'}** {c.name}: {c.detail}" for c in criteria]
    return "\n".join(lines)


def _pairs(counts: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"


def write_reliability_section(name: str, section: str, path: Path = RELIABILITY_PATH) -> Path:
    """Rewrites one suite's section of RELIABILITY.md (soak, faults, fuzz), between its markers."""
    if not path.exists():
        path.write_text(RELIABILITY_HEADER)
    return report.write_section(name, section, path)
