"""`make gpu-check` runs on a lent GPU machine whose Python has no web stack (no Django, Celery or
Channels): the tooling it runs and the engine's test helpers must import without them."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[2]
WEB_STACK = ("django", "celery", "channels", "daphne", "channels_redis", "psycopg", "redis", "kombu")


def test_the_gpu_checks_tooling_and_the_engines_test_helpers_import_without_the_web_stack():
    script = textwrap.dedent(f"""
        import sys

        class WebStackRefused:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {WEB_STACK!r}:
                    raise ModuleNotFoundError(f"{{name}} (not on the lent GPU machine)")

        sys.meta_path.insert(0, WebStackRefused())
        import benchmarks.gpu_check, benchmarks.gpu_bench, benchmarks.gpu_probe
        import benchmarks.server_process, benchmarks.sse_client
        import tests.conftest, tests.inference.models, tests.inference.serving
    """)

    run = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)

    assert run.returncode == 0, run.stderr
