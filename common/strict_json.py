"""JSON as the standard has it, for request bodies from strangers.

Python's json module reads NaN and Infinity (and reads 1e400 as infinity), which JSON has not
and which pass every range check (`not (x < 0)` is true for NaN), and it recurses once per
level of nesting, so a body nested 100,000 deep raises RecursionError. (Strings are the
caller's to judge: a lone surrogate escape such as "\\ud800" is valid JSON that no encoder
can write, and a database may refuse a NUL.)
"""

import json
import math
import sys
from typing import Any


class InvalidJson(ValueError):
    """The text is not JSON we accept; the message says why, for a 400 answer."""


def loads(raw: bytes | str) -> Any:
    """The values of `raw`, every number finite."""
    try:
        return json.loads(raw, parse_constant=_refuse_constant, parse_float=_finite_float, parse_int=_int)
    except RecursionError:
        raise InvalidJson("the body is not valid JSON: it nests too deeply") from None
    except ValueError as error:  # JSONDecodeError and Unicode errors are ValueErrors
        raise InvalidJson(f"the body is not valid JSON: {error}") from error


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range for a number")
    return value


def _int(text: str) -> int:
    # Python converts at most sys.get_int_max_str_digits() digits (CVE-2020-10735), and its
    # refusal speaks of Python ("use sys.set_int_max_str_digits()"), not of the body.
    digits = len(text.lstrip("-"))
    if digits > sys.get_int_max_str_digits():
        raise ValueError(f"a number of {digits} digits is too long")
    return int(text)
