"""One vocabulary: the JS front end and the API's description name statuses, finish reasons and
cancellers exactly as Python does."""

import json
import re
from pathlib import Path

import yaml

from common.vocabulary import CancelledBy, FinishReason, GenerationStatus, MessageStatus

VOCABULARY_JS = Path(__file__).resolve().parent.parent / "frontend" / "vocabulary.js"
CHAT_API_DOCUMENT = Path(__file__).resolve().parent.parent / "docs" / "openapi-chat.yaml"


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


def enums_of(node, name: str) -> list[list]:
    """Every enum the document gives a property called `name`, wherever it is."""
    if isinstance(node, list):
        return [enum for item in node for enum in enums_of(item, name)]
    if not isinstance(node, dict):
        return []
    found = [node[name]["enum"]] if isinstance(node.get(name), dict) and "enum" in node[name] else []
    return found + [enum for value in node.values() for enum in enums_of(value, name)]


def test_the_chat_api_document_names_exactly_who_can_cancel_an_answer():
    enums = enums_of(yaml.safe_load(CHAT_API_DOCUMENT.read_text()), "cancelled_by")

    assert enums and all(enum == ["", *(canceller.value for canceller in CancelledBy)] for enum in enums)
