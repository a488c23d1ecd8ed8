"""runtime: our own pieces of the async runtime under Django, each measured (BENCHMARKS.md).

Here live the database threads (connections held by a small pool, not a thread per request),
state kept per event loop, `to_the_end` (work a cancel must not cut short), middleware run on the
event loop, the ASGI handler without a thread per request, and the SQLite backend whose writers
queue in Python. It knows nothing of conversations: it imports Django and the standard library,
never another part of chatapp.
"""
