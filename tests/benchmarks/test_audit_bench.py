"""`python -m benchmarks audit` fills, rolls up and times the staff page (a small run here)."""

import json
import os
import subprocess
import sys

import pytest

from harness.child_process import REPO_DIR

ON_POSTGRES = os.environ.get("DATABASE_URL", "").startswith("postgres")


@pytest.mark.process
@pytest.mark.skipif(not ON_POSTGRES, reason="the benchmark fills PostgreSQL with generate_series")
def test_a_small_audit_benchmark_fills_rolls_up_and_times_every_page():
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks", "audit", "--generations", "3000", "--days", "20",
         "--requests", "2", "--no-publish"],
        cwd=REPO_DIR, capture_output=True, text=True, timeout=300)

    # The verdict on the 300 ms target is the published run's to give (BENCHMARKS.md): a small run
    # on a loaded 2-core machine may miss it (307 ms once), so either verdict is a finished run.
    assert run.returncode in (0, 1), run.stdout + run.stderr
    figures = json.loads(run.stdout.strip().splitlines()[-1])
    assert figures["generations"] == 3000
    # Every ended day of the spread, not today (the first one may hold no row late in the day).
    assert figures["days_rolled"] in (19, 20)
    assert len(figures["rolled_year_ms"]) == len(figures["rolled_year_one_model_ms"]) == 2
    verdict = "PASS" if run.returncode == 0 else "FAIL"
    assert f"**{verdict}** every page under 300 ms" in run.stdout


@pytest.mark.process
def test_without_postgresql_the_benchmark_says_it_is_skipped():
    run = subprocess.run([sys.executable, "-m", "benchmarks", "audit", "--database", "sqlite:///x"],
                         cwd=REPO_DIR, capture_output=True, text=True, timeout=60)

    assert run.returncode == 0 and "skipped" in run.stdout
