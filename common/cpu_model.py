"""This CPU's name, for what is kept per machine (inference/engine/matrix_choice.py) and for
what a benchmark reports it ran on."""

import platform
from pathlib import Path


def cpu_model() -> str:
    """The name Linux's /proc/cpuinfo gives, else what Python's platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"
