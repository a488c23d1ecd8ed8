"""Settings for a daphne that also serves the probe views in tests/probe_views.py."""

from tests.settings import *  # noqa: F403

ROOT_URLCONF = "tests.probe_urls"
