import datetime
import sys

import hypothesis
from hypothesis import HealthCheck, Phase

from reliability.report import write_reliability_section
from tests.fuzz import tally

# Sizes: `make test` runs the short profile (the same examples each time, so CI is stable);
# `make fuzz` chooses the long one with --hypothesis-profile and writes RELIABILITY.md.
_COMMON = dict(deadline=None, database=None, phases=[Phase.explicit, Phase.generate],
               suppress_health_check=list(HealthCheck))
hypothesis.settings.register_profile("fuzz-short", max_examples=6, derandomize=True, **_COMMON)
hypothesis.settings.register_profile("fuzz-long", max_examples=150, **_COMMON)
LONG = "fuzz-long"


def fuzz_settings() -> hypothesis.settings:
    chosen = hypothesis.settings.get_current_profile_name()
    return hypothesis.settings.get_profile(chosen if chosen.startswith("fuzz-") else "fuzz-short")


def pytest_sessionfinish(session, exitstatus):
    if hypothesis.settings.get_current_profile_name() != LONG or not tally.RUN.tallies:
        return
    command = "make fuzz  # " + " ".join(["python -m pytest", *session.config.invocation_params.args])
    section = tally.fuzz_section(tally.RUN, command, datetime.datetime.now(datetime.UTC))
    write_reliability_section("fuzz", section)
    print("\nfuzz: wrote the Fuzz section of RELIABILITY.md", file=sys.stderr)
