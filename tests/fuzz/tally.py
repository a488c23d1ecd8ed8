"""What a fuzz run saw, per endpoint, and the "Fuzz" section of RELIABILITY.md written from it."""

import datetime
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import requests

# A finding quotes at most this much of the request that caused it.
QUOTE_CHARS = 160


@dataclass
class Finding:
    endpoint: str
    status: int
    # "generated", or which hostile value: one line per source in the report.
    source: str
    request: str
    what: str

    def __str__(self) -> str:
        return f"{self.endpoint} answered {self.status} ({self.what}) to {self.request}"


@dataclass
class Tally:
    """One endpoint's examples and what went wrong with them."""

    num_examples: int = 0
    server_errors: list[Finding] = field(default_factory=list)
    rows_stored: list[Finding] = field(default_factory=list)


@dataclass
class FuzzRun:
    tallies: dict[str, Tally] = field(default_factory=lambda: defaultdict(Tally))
    # Which service answered its health check after its endpoints were fuzzed.
    health: dict[str, int] = field(default_factory=dict)

    def tally(self, endpoint: str) -> Tally:
        return self.tallies[endpoint]


RUN = FuzzRun()


def quote(text: str) -> str:
    return text if len(text) <= QUOTE_CHARS else text[:QUOTE_CHARS] + f"… ({len(text)} chars)"


def exchange(endpoint: str, source: str, request: str, send: Callable[[], requests.Response],
             stored_rows: Callable[[], tuple[int, ...]] = tuple) -> Finding | None:
    """Sends one request and tallies it: a 5xx is a server error, and a 4xx must store nothing."""
    tally = RUN.tally(endpoint)
    tally.num_examples += 1
    before = stored_rows()
    response = send()
    if response.status_code >= 500:
        what = f"{response.headers.get('content-type', 'no content type')}: {response.text[:60]!r}"
        finding = Finding(endpoint, response.status_code, source, quote(request), what)
        tally.server_errors.append(finding)
        return finding
    after = stored_rows() if response.status_code >= 400 else before
    if after != before:
        finding = Finding(endpoint, response.status_code, source, quote(request),
                          f"rows (conversations, messages, generations) {before} became {after}")
        tally.rows_stored.append(finding)
        return finding
    return None


def distinct(findings: list[Finding]) -> list[Finding]:
    """One finding per endpoint, status and kind: a hundred inputs that hit one bug are one line."""
    seen, kept = set(), []
    for finding in findings:
        key = (finding.endpoint, finding.status, finding.source, finding.what)
        if key not in seen:
            seen.add(key)
            kept.append(finding)
    return kept


def assert_none_found(findings: list[Finding | None]) -> None:
    found = [str(finding) for finding in findings if finding]
    assert not found, f"{len(found)} of {len(findings)} requests went wrong:\n" + "\n".join(found)


def fuzz_section(run: FuzzRun, command: str, now: datetime.datetime) -> str:
    server_errors = [f for t in run.tallies.values() for f in t.server_errors]
    rows_stored = [f for t in run.tallies.values() for f in t.rows_stored]
    lines = [
        "## Fuzz", "",
        f"Command: `{command}` (written by the run itself, {now:%Y-%m-%d %H:%M} UTC).", "",
        "Property-based requests generated from docs/openapi-chat.yaml and "
        "docs/openapi-inference.yaml by schemathesis (valid and invalid ones), plus hand-picked "
        "hostile bodies (NaN/Infinity, NUL, lone surrogates, JSON nested 100,000 deep, integers "
        "of 2^31 and 2^64, nulls, 5 MB), against a real daphne on PostgreSQL with the real model "
        "behind it, and against the inference service alone.", "",
        "| endpoint | examples | server errors | rows stored by refused requests |",
        "|---|---:|---:|---:|",
    ]
    for endpoint, tally in sorted(run.tallies.items()):
        lines.append(f"| `{endpoint}` | {tally.num_examples} | {len(tally.server_errors)} | "
                     f"{len(tally.rows_stored)} |")
    lines += ["", f"Server errors found: {len(server_errors)} (0 expected). Rows stored from refused "
              f"requests: {len(rows_stored)} (0 expected).",
              "Health afterwards: " + ", ".join(f"{name} {status}" for name, status in
                                                sorted(run.health.items())) + " (200 expected).", ""]
    found = distinct(server_errors + rows_stored)
    if found:
        lines += ["Distinct failures (first input of each):", ""]
        lines += [f"- {finding}".replace("|", "\\|") for finding in found]
        lines.append("")
    return "\n".join(lines)

