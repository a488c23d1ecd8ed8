"""What a conversation sets for its answers: the model, the system prompt and the sampling.

Each value is checked before anything is stored, with a code of its own, so that the page can
say which one is wrong. The sampling bounds are the inference service's own (and OpenAI's):
temperature from 0 to 2, top_p above 0 up to 1. A model must be one an upstream serves now
(chatapp/upstream/models.py); a conversation may keep a model that has since gone, and is then
refused an answer (503 `model_unavailable`) until the user picks another.
"""

import math
from dataclasses import dataclass

from django.conf import settings

from . import request_input
from .errors import ApiError
from .upstream import models as upstream_models


@dataclass(frozen=True)
class Bounds:
    name: str
    low: float
    high: float
    is_low_open: bool = False  # the low bound itself is refused

    def checked(self, value) -> float | None:
        """The value as a float, or None (the default); anything else is refused with 400."""
        if value is None:
            return None
        # bool is an int to Python, not a number to a person. The range is compared first: an
        # integer too large for a float is simply out of it (and NaN is out of every range).
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not is_number or not self.contains(value) or not math.isfinite(value):
            low = "above" if self.is_low_open else "from"
            raise ApiError(400, f"{self.name}_out_of_range",
                           f"{self.name} must be a number {low} {self.low:g} to {self.high:g}, or null for the default")
        return float(value)

    def contains(self, value: int | float) -> bool:
        above = value > self.low if self.is_low_open else value >= self.low
        return above and value <= self.high

    def as_json(self, default: float) -> dict:
        return {"min": self.low, "max": self.high, "min_excluded": self.is_low_open, "default": default}


TEMPERATURE = Bounds("temperature", 0.0, 2.0)
TOP_P = Bounds("top_p", 0.0, 1.0, is_low_open=True)
_ABSENT = object()


async def checked(body: dict, *, current_model: str | None = None) -> dict:
    """The settings `body` carries, checked, by field name; those it leaves out are left out.

    A model is checked against what the upstreams serve, unless it is the conversation's
    `current_model` (kept while other settings change, even if it has gone meanwhile).
    """
    found = {}
    if body.get("system_prompt", _ABSENT) is not _ABSENT:
        found["system_prompt"] = system_prompt(request_input.text(body, "system_prompt"))
    if body.get("model", _ABSENT) is not _ABSENT:
        name = request_input.text(body, "model")
        if name != current_model:
            await known_model(name)
        found["model"] = name
    for bounds in (TEMPERATURE, TOP_P):
        if bounds.name in body:
            found[bounds.name] = bounds.checked(body[bounds.name])
    return found


def system_prompt(text: str) -> str:
    if len(text) > settings.CHAT_MAX_SYSTEM_PROMPT_CHARS:
        raise ApiError(400, "system_prompt_too_long",
                       f"a system prompt holds at most {settings.CHAT_MAX_SYSTEM_PROMPT_CHARS} characters")
    return text


async def known_model(name: str) -> str:
    """`name`, when an upstream serves that model now; else 400 `unknown_model`."""
    await upstream_models.fresh(name, waits=True)
    if not upstream_models.is_served(name):
        raise ApiError(400, "unknown_model", f"no upstream serves a model named {name[:200]!r}")
    return name


async def served_model(name: str) -> str:
    """The conversation's own model, when an upstream still serves it; else 503."""
    await upstream_models.fresh(name)
    if not upstream_models.is_served(name):
        raise ApiError(503, "model_unavailable",
                       f"the model {name!r} is not served now; choose another model for this conversation")
    return name


def sampling(conversation) -> dict:
    """What goes upstream with an answer (and into its audit row): the conversation's own
    sampling, else the defaults."""
    return {"temperature": _or(conversation.temperature, settings.CHAT_TEMPERATURE),
            "top_p": _or(conversation.top_p, settings.CHAT_TOP_P),
            "max_tokens": settings.CHAT_MAX_TOKENS}


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def limits_json() -> dict:
    """The bounds and defaults, for the page's settings panel."""
    return {"sampling": {"temperature": TEMPERATURE.as_json(settings.CHAT_TEMPERATURE),
                         "top_p": TOP_P.as_json(settings.CHAT_TOP_P)},
            "max_system_prompt_chars": settings.CHAT_MAX_SYSTEM_PROMPT_CHARS}
