"""One vocabulary: the JS front end names statuses, finish reasons and cancellers exactly as Python does."""

import json
import re
from pathlib import Path

from common.vocabulary import CancelledBy, FinishReason, GenerationStatus, MessageStatus

VOCABULARY_JS = Path(__file__).resolve().parent.parent / "frontend" / "vocabulary.js"


def js_list(name: str) -> list[str]:
    match = re.search(rf"export const {name} = Object\.freeze\((\[.*?\])\);", VOCABULARY_JS.read_text(), re.S)
    assert match, f"{name} is not exported from frontend/vocabulary.js"
    return json.loads(match.group(1))


def test_the_front_end_knows_exactly_the_message_statuses():
    assert js_list("MESSAGE_STATUSES") == [status.value for status in MessageStatus]


def test_the_front_end_knows_exactly_the_finish_reasons():
    assert js_list("FINISH_REASONS") == [reason.value for reason in FinishReason]


def test_the_front_end_knows_exactly_the_generation_statuses():
    assert js_list("GENERATION_STATUSES") == [status.value for status in GenerationStatus]


def test_the_front_end_knows_exactly_who_can_cancel_an_answer():
    assert js_list("CANCELLERS") == [canceller.value for canceller in CancelledBy]
