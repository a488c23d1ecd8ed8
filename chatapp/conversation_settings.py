"""What a conversation sets for its answers: the model, the system prompt and the sampling.

Each value is checked before anything is stored, with a code of its own, so that the page can
say which one is wrong. The sampling bounds are the inference service's own (and OpenAI's):
temperature from 0 to 2, top_p above 0 up to 1. Whether an upstream serves a model is the
upstream room's to say (chatapp/upstream/models.py, asked by the API); a conversation may keep a
model that has since gone, and is then refused an answer until the user picks another.
"""

import math
from dataclasses import dataclass

from django.conf import settings

from . import request_input
from .errors import ApiError


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


def checked(body: dict) -> dict:
    """The settings `body` carries, checked, by field name; those it leaves out are left out.
    A model is only checked to be a string here: whether it is served is asked of the upstreams."""
    found = {}
    if body.get("system_prompt", _ABSENT) is not _ABSENT:
        found["system_prompt"] = system_prompt(request_input.text(body, "system_prompt"))
    if body.get("model", _ABSENT) is not _ABSENT:
        found["model"] = request_input.text(body, "model")
    for bounds in (TEMPERATURE, TOP_P):
        if bounds.name in body:
            found[bounds.name] = bounds.checked(body[bounds.name])
    return found


def system_prompt(text: str) -> str:
    if len(text) > settings.CHAT_MAX_SYSTEM_PROMPT_CHARS:
        raise ApiError(400, "system_prompt_too_long",
                       f"a system prompt holds at most {settings.CHAT_MAX_SYSTEM_PROMPT_CHARS} characters")
    return text


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
