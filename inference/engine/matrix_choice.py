"""What timing the matrices chose on this machine (matrices.py: the layout, and where ours
serves, the most rows our product multiplies), kept in the cache directory for the next start.

Timing them takes seconds of every core at each start: 13 s of a 2-core AVX2 AMD EPYC for the
default model (7 s choosing the layout, 6 s the row limit), before the service answers; and the
test suite starts the service some thirty times. What the timing finds depends on the CPU, the
threads, torch, our kernels and the model's matrices, all in the choice's key with the timing's
own code; a start where any differs times them again. Timed again at one start and the next,
the choice moved with the machine's load of the moment (matrices.py, PROBE_ROWS), so a kept one
is no worse a guess than a new one. Delete the file (the service logs its path) to time them
again.
"""

import hashlib
import json
import logging
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from common.cpu_model import cpu_model

from . import matrices, own_kernels
from .loader import cpu_flags
from .matrices import MatrixLayout

logger = logging.getLogger(__name__)

FOLDER = "matrices"


@dataclass(frozen=True)
class MatrixChoice:
    layout: MatrixLayout
    dot_row_limit: int | None  # where the layout is ours (DOT): the most rows ours multiplies
    timings: str  # what the timing measured, for the log


def path_for(cache_dir: Path, weights: list[torch.Tensor]) -> Path:
    """Where the choice for these weights on this machine is kept."""
    return cache_dir / FOLDER / f"choice-{_key(weights)}.json"


def read(path: Path) -> MatrixChoice | None:
    """The choice kept at `path`, or None (never timed, or unreadable)."""
    try:
        kept = json.loads(path.read_text())
        choice = MatrixChoice(MatrixLayout(kept["layout"]), kept["dot_row_limit"], kept["timings"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as error:
        logger.warning("matrices: the kept choice %s could not be read (%s); timing them again", path, error)
        return None
    logger.info("matrices: %s, as timed at an earlier start (%s; delete %s to time them again)",
                choice.layout, choice.timings, path)
    return choice


def write(path: Path, choice: MatrixChoice) -> None:
    """Keeps `choice` at `path` for the next start; a start that cannot write it only times them
    again."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Written whole, then renamed: two services starting at once each write a whole file.
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as file:
            json.dump({**asdict(choice), "layout": str(choice.layout)}, file)
        os.replace(file.name, path)
    except OSError as error:
        logger.warning("matrices: the choice could not be kept in %s (%s)", path.parent, error)


def _key(weights: list[torch.Tensor]) -> str:
    # The timing's own code too: a change to how it times (matrices.py) times them again.
    machine = [cpu_model(), " ".join(sorted(cpu_flags())), str(os.cpu_count()), str(torch.get_num_threads()),
               torch.__version__, own_kernels.source_digest(), Path(matrices.__file__).read_text()]
    shapes = [f"{tuple(weight.shape)} {weight.dtype} {weight.device.type}" for weight in weights]
    return hashlib.sha256("\0".join([*machine, *shapes]).encode()).hexdigest()[:16]
