"""The staff audit page over a large audit log: 1,000,000 generations on PostgreSQL.

Fills a database of the run's own with generations spread over the last `--days` days (one
INSERT … SELECT from generate_series per 100,000 rows: the server makes them, nothing crosses
the wire), rolls the past days up (chatapp/staff/rollups.py, timed), then times GET /staff/audit/
through Django's whole request path (middleware, view, template; the test client, no socket)
for the default 14 days and for a whole year, of every model and of one (`?model=`). Target:
every page under 300 ms with rollups. The page without rollups (the raw rows of 14 days) is timed
too, for comparison.
"""

import argparse
import json
import os
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from common import env

from . import report

SECTION = "audit"
TARGET_MS = 300
BATCH = 100_000
SECOND_MODEL = "qwen2.5-0.5b"  # the smaller share of the fill: a filtered page

# Ended generations only, in the proportions of a busy service: most stop, some hit the limit,
# some are cancelled, a few fail; `r` picks one, `m` the model (two, 70/30), the other random()
# calls make the numbers.
FILL = """
INSERT INTO chatapp_generation (request_id, user_id, conversation_id, model, sampling, prompt_messages,
    input_tokens, output_tokens, started_at, first_token_at, finished_at, ttft_ms, itl_mean_ms, itl_max_ms,
    status, finish_reason, cancelled_by, error_code, error_message, final_text, heartbeat_at)
SELECT gen_random_uuid(), %(user)s, %(conversation)s,
    CASE WHEN m < 0.7 THEN 'SmolLM2-135M-Instruct' ELSE %(second_model)s END, '{}', 2,
    (10 + random() * 500)::int, (random() * 500)::int, t, t + ttft * interval '1 millisecond',
    t + (ttft + 5000 * random()) * interval '1 millisecond', ttft, 5 + 40 * random(), 60 + 200 * random(),
    CASE WHEN r < 0.80 THEN 'completed' WHEN r < 0.88 THEN 'truncated' WHEN r < 0.96 THEN 'stopped' ELSE 'failed' END,
    CASE WHEN r < 0.80 THEN 'stop' WHEN r < 0.88 THEN 'length' WHEN r < 0.96 THEN 'cancelled' ELSE 'error' END,
    CASE WHEN r >= 0.88 AND r < 0.96 THEN 'user' ELSE '' END,
    CASE WHEN r >= 0.96 THEN 'upstream_error' ELSE '' END, '', '', t
FROM (SELECT now() - random() * %(days)s * interval '1 day' AS t, random() AS r, random() AS m, 20 + 400 * random() AS ttft
      FROM generate_series(1, %(rows)s)) AS drawn
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--generations", type=int, default=1_000_000, help="rows to fill (default 1000000)")
    parser.add_argument("--days", type=int, default=365, help="the rows' spread, ending now (default 365)")
    parser.add_argument("--requests", type=int, default=20, help="timed page loads per period (default 20)")
    parser.add_argument("--quick", action="store_true", help="100,000 generations, for a smoke run")
    parser.add_argument("--database", default=env.string("DATABASE_URL"),
                        help="a PostgreSQL server URL (default: DATABASE_URL); the run makes a database of its own")
    report.add_publish_arguments(parser, "the BENCHMARKS.md section")


def run(args: argparse.Namespace) -> int:
    if not args.database.startswith("postgres"):
        # `make bench` on the embedded default (SQLite) runs the others; this one says why not.
        print("audit: skipped: it needs a PostgreSQL server (--database or DATABASE_URL)")
        return 0
    from .relay_stack import fresh_database

    generations = 100_000 if args.quick else args.generations
    with tempfile.TemporaryDirectory() as scratch, fresh_database(args.database, Path(scratch), "audit_bench") as url:
        figures = _measure(url, generations, args.days, args.requests)
    return _report(args, generations, figures)


def _measure(database_url: str, generations: int, days: int, requests: int) -> dict:
    os.environ.update({"DATABASE_URL": database_url, "DJANGO_SETTINGS_MODULE": "chatapp.settings",
                       "DJANGO_SECRET_KEY": "audit-benchmark-only-not-a-secret", "DJANGO_DEBUG": "0",
                       "DJANGO_LOG_LEVEL": "WARNING", "REDIS_URL": "", "ALLOWED_HOSTS": "testserver"})
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.urls import reverse
    from django.utils import timezone

    from chatapp.models import Conversation
    from chatapp.staff.rollups import roll_up_missing_days

    call_command("migrate", "--noinput", verbosity=0)
    staff = get_user_model().objects.create_user("audit-bench", is_staff=True, is_superuser=True)
    conversation = Conversation.objects.create(owner=staff)
    started = time.perf_counter()
    with connection.cursor() as cursor:
        for first in range(0, generations, BATCH):
            cursor.execute(FILL, {"user": staff.pk, "conversation": conversation.pk, "days": days,
                                  "rows": min(BATCH, generations - first), "second_model": SECOND_MODEL})
        cursor.execute("ANALYZE chatapp_generation")
    fill_s = time.perf_counter() - started

    client = Client()
    client.force_login(staff)
    today = timezone.now().date()
    year = {"from": (today - timedelta(days=365)).isoformat(), "to": today.isoformat()}

    def page_ms(params: dict) -> list[float]:
        times = []
        for _ in range(requests):
            began = time.perf_counter()
            response = client.get(reverse("staff-audit"), params)
            times.append((time.perf_counter() - began) * 1000)
            assert response.status_code == 200, response.status_code
        return times

    raw_14 = page_ms({})
    started = time.perf_counter()
    rolled = len(roll_up_missing_days())
    rollup_s = time.perf_counter() - started
    return {"fill_s": fill_s, "rollup_s": rollup_s, "days_rolled": rolled, "raw_14_ms": raw_14,
            "rolled_14_ms": page_ms({}), "rolled_year_ms": page_ms(year),
            "rolled_year_one_model_ms": page_ms({**year, "model": SECOND_MODEL}),
            "again_rollup_s": _timed(roll_up_missing_days)}


def _timed(call) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def _spread(times: list[float]) -> str:
    return f"median {statistics.median(times):.0f} ms, max {max(times):.0f} ms"


def _report(args, generations: int, figures: dict) -> int:
    rows = {
        "generations filled": f"{generations:,} over {args.days} days in {figures['fill_s']:.1f} s",
        "first roll-up": f"{figures['days_rolled']} days in {figures['rollup_s']:.1f} s "
                         f"(then {figures['again_rollup_s'] * 1000:.0f} ms with nothing left to roll up)",
        "page, 14 days, raw rows (no rollups)": _spread(figures["raw_14_ms"]),
        "page, 14 days, rollups + today's rows": _spread(figures["rolled_14_ms"]),
        "page, a year, rollups + today's rows": _spread(figures["rolled_year_ms"]),
        "page, a year, one model, rollups + today's rows": _spread(figures["rolled_year_one_model_ms"]),
    }
    slowest = max(figures["rolled_14_ms"] + figures["rolled_year_ms"] + figures["rolled_year_one_model_ms"])
    ok = slowest < TARGET_MS
    lines = [f"| {name} | {value} |" for name, value in rows.items()]
    verdict = f"- **{'PASS' if ok else 'FAIL'}** every page under {TARGET_MS} ms with rollups: slowest {slowest:.0f} ms"
    print("\n".join(lines + [verdict]))
    print(f"command: {args.command}")
    if report.publishing(args, args.quick or generations < 1_000_000):
        report.write_section(SECTION, "\n".join([
            "## Staff audit page over 1,000,000 generations", "",
            f"Command: `{args.command}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}).", "",
            f"PostgreSQL; {args.requests} loads per row through Django's request path (test client); "
            "past days read from their daily rollups (one row for every model and one per model, two "
            "models here), today from its rows; the database, the fill "
            "and the requests share the machine's cores (2 here, shared with other work).", "",
            "| measure | value |", "|---|---|", *lines, "", verdict,
        ]))
    print(json.dumps({"generations": generations, **figures}))
    return 0 if ok else 1
