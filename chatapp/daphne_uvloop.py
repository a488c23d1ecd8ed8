"""The web process: daphne, its loop made by uvloop.

daphne runs Twisted on an asyncio loop that it makes when `daphne.server` is imported; made
under uvloop's policy, that loop is uvloop's (libuv, in C) instead of asyncio's selector loop.
Each relayed event is an upstream read (anyio pauses and resumes reading around it) and a write
that Twisted schedules through add_writer/remove_writer: at 500 streams py-spy put the selector
bookkeeping alone at about a fifth of daphne's loop. On uvloop the same daphne carried 500
streams with text moving every 93 ms at the median instead of every 140 (BENCHMARKS.md, Relay).

    python -m chatapp.daphne_uvloop <daphne's own arguments>
"""

import asyncio

import uvloop


def main() -> None:
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())  # before daphne makes its loop
    from daphne.cli import CommandLineInterface

    CommandLineInterface.entrypoint()


if __name__ == "__main__":
    main()
