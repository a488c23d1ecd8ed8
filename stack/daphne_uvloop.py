"""The web process: daphne, its loop made by uvloop, listening with room for a burst.

daphne runs Twisted on an asyncio loop that it makes when `daphne.server` is imported; made
under uvloop's policy, that loop is uvloop's (libuv, in C) instead of asyncio's selector loop.
Each relayed event is an upstream read (anyio pauses and resumes reading around it) and a write
that Twisted schedules through add_writer/remove_writer: at 500 streams py-spy put the selector
bookkeeping alone at about a fifth of daphne's loop. On uvloop the same daphne carried 500
streams with text moving every 93 ms at the median instead of every 140 (BENCHMARKS.md, Relay).

daphne's `-b`/`-p` listen with Twisted's default backlog of 50 connections waiting to be
accepted; nginx opens a connection to daphne per answer beyond its idle ones, and when 500
answers start at once the kernel drops the SYNs past the backlog, which nginx sends again after
1, 3, 7 s: through nginx the last of 500 streams started after 14.6 s against 6.7 s direct. Here
`-b`/`-p` become a TCP endpoint with a backlog of LISTEN_BACKLOG (the kernel's somaxconn caps it).

Twisted parses a POSTed form body into `request.args` before daphne sees the request, and
answers a bare HTML 400 itself to a multipart body it cannot parse; daphne never reads those
args (Django parses what it needs), so each request is made with that parsing off, and such a
body reaches Django, whose API answers it in JSON (a 400: it cannot be read; a form that can,
a 415: the API reads JSON only). Twisted also answers a bare 400, no body, to a request line
whose address holds bytes past ASCII, which browsers escape but curl and scripts send as typed
(`?q=café`) and nginx passes on: each such byte is percent-escaped first, as a browser would
have, so that Django answers the address as it answers the escaped one. And Twisted answers
the same bare 400 to a request head past 16 KB or 500 lines, which nginx reads (up to 32 KB, in
as many lines as fit) and passes on: daphne's bounds are set above nginx's, so that nginx's own
refusal, JSON under /api/, is the only one a client behind it meets.

    python -m stack.daphne_uvloop <daphne's own arguments>
"""

import argparse
import asyncio
import re
import sys

import uvloop

LISTEN_BACKLOG = 1024
# Above nginx's default large_client_header_buffers (4 x 8 KB; a line takes at least 4 bytes),
# with room for the headers nginx adds: still a bound where daphne serves alone.
HEAD_BYTES = 64 * 1024
HEAD_LINES = 10_000


def daphne_arguments(argv: list[str]) -> list[str]:
    """daphne's arguments, with `-b HOST -p PORT` as a TCP endpoint with LISTEN_BACKLOG."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("-b", "--bind", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int)
    given, rest = parser.parse_known_args(argv)
    if given.port is None:
        return argv
    interface = given.bind.replace(":", r"\:")  # Twisted's endpoint strings escape an IPv6 colon
    return ["-e", f"tcp:port={given.port}:interface={interface}:backlog={LISTEN_BACKLOG}", *rest]


def escaped(request_line: bytes) -> bytes:
    """`request_line` with each byte past ASCII percent-escaped: its address as a browser sends it."""
    return re.sub(rb"[\x80-\xff]", lambda byte: b"%%%02X" % byte[0][0], request_line)


def requests_left_to_the_app() -> None:
    """daphne's requests made with Twisted's form parsing off (its HTTPFactory reads the name at
    each connection), their request lines escaped before Twisted parses them (a name its
    HTTPChannel reads at each request), and their heads bounded above nginx's (class attributes
    HTTPChannel reads at each line; tests/test_api_errors_are_json.py fails should any go)."""
    from daphne import http_protocol
    from twisted.web import http

    class UnparsedWebRequest(http_protocol.WebRequest):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, parsePOSTFormSubmission=False, **kwargs)

    http_protocol.WebRequest = UnparsedWebRequest
    http.HTTPChannel.totalHeadersSize, http.HTTPChannel.maxHeaders = HEAD_BYTES, HEAD_LINES
    parse = http._parseRequestLine
    http._parseRequestLine = lambda line: parse(escaped(line))


def main() -> None:
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())  # before daphne makes its loop
    from daphne.cli import CommandLineInterface

    requests_left_to_the_app()

    CommandLineInterface().run(daphne_arguments(sys.argv[1:]))


if __name__ == "__main__":
    main()
