"""`python -m inference [--host H] [--port P] [--model PATH] [--check]`; defaults from the
environment. A setting that cannot be used is one line on stderr and exit status 2, not a
traceback; `--check` only reads the settings (`make run` asks before it starts anything)."""

import argparse
import logging
import os
import sys

from . import huge_pages
from .config import InferenceConfig


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m inference", description=__doc__)
    parser.add_argument("--host", help="interface to bind (INFERENCE_HOST)")
    parser.add_argument("--port", type=int, help="port (INFERENCE_PORT)")
    parser.add_argument("--model", help="HF model directory or .gguf file (INFERENCE_MODEL)")
    parser.add_argument("--check", action="store_true",
                        help="read the settings, then exit: 0, or 2 with one line saying what is "
                             "wrong")
    arguments = parser.parse_args()
    try:
        config = InferenceConfig.from_env(host=arguments.host, port=arguments.port,
                                          model=arguments.model)
    except ValueError as error:
        print(f"inference: {error}", file=sys.stderr, flush=True)
        sys.exit(2)
    if arguments.check:
        return
    if config.huge_pages and (environ := huge_pages.environment(dict(os.environ))) is not None:
        # glibc reads its tunables only when a process starts; torch is not imported yet.
        # The same command line, the interpreter's own options (-X, -u) included.
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], environ)
    from .server import serve  # imports torch
    from .service import InferenceService

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    sys.exit(serve(InferenceService(config), config.host, config.port))


if __name__ == "__main__":
    main()
