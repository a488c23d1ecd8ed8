"""Typed reads of environment variables.

Every read goes through here so that a test can check each variable the code reads against
`.env.example`, and so that a bad value stops start-up with a message naming the variable. A
variable set empty means its default, as unset.
"""

import os
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# Names of every variable read so far in this process, for the test that checks `.env.example`.
names_read: set[str] = set()

HIGHEST_PORT = 65535
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


class BadVariable(ValueError):
    """A variable holds a value that cannot be used; the message names the variable."""


def _raw(name: str) -> str | None:
    names_read.add(name)
    return os.environ.get(name)


def string(name: str, default: str = "") -> str:
    """The value; unset or blank, the default (.env.example lists `NAME=` for "empty: the
    default", and a copy of it as .env sets them so), as every reader here takes it."""
    value = _raw(name)
    return default if value is None or value.strip() == "" else value


def boolean(name: str, default: bool = False) -> bool:
    value = _raw(name)
    if value is None or value.strip() == "":
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise BadVariable(f"{name} must be a boolean (1/0, true/false), got {value!r} ({name}={int(default)} would do)")


def integer(name: str, default: int, minimum: int | None = None) -> int:
    value = parsed(name, default, int, "an integer")
    if minimum is not None and value < minimum:
        raise BadVariable(f"{name} must be at least {minimum}, got {value} ({name}={minimum} would do)")
    return value


def number(name: str, default: float, minimum: float | None = None) -> float:
    value = parsed(name, default, float, "a number")
    if minimum is not None and value < minimum:
        raise BadVariable(f"{name} must be at least {minimum:g}, got {value:g} ({name}={minimum:g} would do)")
    return value


def port(name: str, default: int) -> int:
    """A TCP port, 1 to HIGHEST_PORT: checked here, before a socket's bind raises OverflowError."""
    value = parsed(name, default, int, "an integer")
    if not 1 <= value <= HIGHEST_PORT:
        raise BadVariable(f"{name} must be a port, 1 to {HIGHEST_PORT}, got {value} ({name}={default} would do)")
    return value


def words(name: str, default: str = "") -> list[str]:
    """A comma-separated list; blanks dropped."""
    return [part.strip() for part in string(name, default).split(",") if part.strip()]


def parsed(name: str, default: T, parse: Callable[[str], T], what: str) -> T:
    value = _raw(name)
    if value is None or value.strip() == "":
        return default
    try:
        return parse(value.strip())
    except (ValueError, TypeError) as error:
        raise BadVariable(f"{name} must be {what}, got {value!r} ({name}={default} would do)") from error
