"""The machine a benchmark ran on, for its section's first lines: CPU, cores, memory, the versions
that matter to it, the load when it started, the commit measured."""

import os
import platform
import subprocess
from importlib.metadata import version
from pathlib import Path

from common.cpu_model import cpu_model

from .report import REPO_ROOT


def inference_notes(threads: int) -> dict:
    import torch
    import transformers

    notes = {
        "cpu": cpu_model(), "cores": os.cpu_count(), "memory_gb": _memory_gb(),
        "python": platform.python_version(), "torch": torch.__version__,
        "transformers": transformers.__version__, "threads": threads,
        "load_average": ", ".join(f"{x:.2f}" for x in os.getloadavg()),
        "commit": _commit(), "gpu": None,
    }
    if torch.cuda.is_available():
        notes["gpu"] = torch.cuda.get_device_name(0)
    return notes


def web_notes() -> dict:
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "memory_gb": _memory_gb(),
            "python": platform.python_version(), "django": version("django"),
            "daphne": version("daphne"), "load_average": ", ".join(
                f"{x:.2f}" for x in os.getloadavg()), "commit": _commit()}


def _memory_gb() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024 / 1e9
    except OSError:
        pass
    return 0.0


def _commit() -> str:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT,
                                capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip()
        return commit + (" with uncommitted changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
