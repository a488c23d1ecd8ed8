"""A path as nginx routes it: it merges runs of slashes and resolves dot segments before it picks
a location (`//api/x` and `/static/../api/x` go to /api/), then passes the path on as it was sent.
Where Django decides what nginx decided before it (whether a path is the API's), it reads this."""

import posixpath
import re


def routed(path: str) -> str:
    """`path` (decoded, as Django's path_info) as nginx's location match reads it."""
    resolved = posixpath.normpath(re.sub("/{2,}", "/", path))
    # normpath drops a trailing slash, which a location's prefix (/api/) may need.
    return resolved if resolved == "/" or not path.endswith("/") else f"{resolved}/"
