"""Hand-picked hostile request bodies: the values a JSON generator never makes, as raw bytes."""

import json
from collections.abc import Iterator

DEPTH = 100_000
FIVE_MB = 5 * 1024 * 1024
# Stands for the hostile value in a body's template; replaced in the JSON text, quotes and all.
SLOT = "@@hostile@@"

# Raw JSON text (or what Python's json module reads as JSON): NaN and Infinity are not JSON,
# but json.loads takes them, so they reach our validation.
VALUES = {
    "NaN": "NaN",
    "Infinity": "Infinity",
    "-Infinity": "-Infinity",
    "1e400": "1e400",
    "a NUL character": '"a\\u0000b"',
    "a lone surrogate": '"\\ud800"',
    "null": "null",
    "2^31": str(2**31),
    "2^64": str(2**64),
    "-2^63-1": str(-(2**63) - 1),
    "an array nested 100,000 deep": "[" * DEPTH + "]" * DEPTH,
}


def filled(template: dict, raw: str) -> bytes:
    return json.dumps(template).replace(json.dumps(SLOT), raw).encode("utf-8", "surrogatepass")


def bodies(templates: dict[str, dict]) -> Iterator[tuple[str, bytes]]:
    """(what it is, body) for every hostile value in every slot, then whole hostile bodies.

    `templates` names each slot (a field) and holds a valid body with SLOT where the value goes.
    """
    for slot, template in templates.items():
        for name, raw in VALUES.items():
            yield f"{slot} = {name}", filled(template, raw)
    first = next(iter(templates.values()))
    yield "a body nested 100,000 deep", ("[" * DEPTH + "]" * DEPTH).encode()
    yield "a body of 5 MB", filled(first, json.dumps("x" * FIVE_MB))
    yield "a body that is not UTF-8", filled(first, '"\\u00e9"').replace(b"\\u00e9", b"\xff")
