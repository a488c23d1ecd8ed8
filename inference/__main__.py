"""`python -m inference [--host H] [--port P] [--model PATH] [--check | --prepare]`; defaults from
the environment. A setting that cannot be used, or that this machine cannot serve (a cache
directory it cannot write, a CUDA device it lacks), is one line on stderr and exit status 2, not a
traceback; `--check` only checks them (`make run` asks before it starts anything); `--prepare`
also makes what a first start makes once per machine (`make test` asks before its tests)."""

import argparse
import logging
import os
import sys
from typing import NoReturn

from . import huge_pages
from .config import InferenceConfig


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m inference", description=__doc__)
    parser.add_argument("--host", help="interface to bind (INFERENCE_HOST)")
    parser.add_argument("--port", type=int, help="port (INFERENCE_PORT)")
    parser.add_argument("--model", help="HF model directory or .gguf file (INFERENCE_MODEL)")
    parser.add_argument("--check", action="store_true",
                        help="check the settings, and that this machine can serve them, then "
                             "exit: 0, or 2 with one line saying what is wrong")
    parser.add_argument("--prepare", action="store_true",
                        help="check them, then make what the first start makes once per machine "
                             "(the GGUF model converted, our kernels built) and exit")
    arguments = parser.parse_args()
    try:
        config = InferenceConfig.from_env(host=arguments.host, port=arguments.port,
                                          model=arguments.model)
        config.check_cache_dir()
    except ValueError as error:
        _refuse(error)
    with_huge_pages = (config.huge_pages and not (arguments.check or arguments.prepare)
                       and huge_pages.environment(dict(os.environ)))
    if with_huge_pages:
        # glibc reads its tunables only when a process starts; torch is not imported yet.
        # The same command line, the interpreter's own options (-X, -u) included.
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], with_huge_pages)
    _check_device(config.device)
    if arguments.check:
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if arguments.prepare:
        _prepare(config)
        return
    from .server import serve  # imports torch
    from .service import InferenceService

    sys.exit(serve(InferenceService(config), config.host, config.port))


def _prepare(config: InferenceConfig) -> None:
    """A later start, or a test's, then loads in seconds, as its deadline expects."""
    from .service import prepare  # imports torch

    try:
        why_not = prepare(config)
    except FileNotFoundError as error:  # the default model's package is not installed
        _refuse(ValueError(str(error)))
    print(f"inference: prepared in {config.cache_dir}"
          + (f"; our kernels are not used here: {why_not}" if why_not else ""), flush=True)


def _check_device(requested: str) -> None:
    """Exits with one line when the device asked for is not on this machine; only "cuda" can
    be missing, and only then is torch imported here."""
    if requested != "cuda":
        return
    from .device import resolve  # torch: seconds, where a check that reads settings takes none

    try:
        resolve(requested)
    except ValueError as error:
        _refuse(error)


def _refuse(error: ValueError) -> NoReturn:
    print(f"inference: {error}", file=sys.stderr, flush=True)
    sys.exit(2)


if __name__ == "__main__":
    main()
