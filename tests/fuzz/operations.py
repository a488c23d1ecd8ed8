"""The operations of an OpenAPI document in docs/, and Hypothesis strategies for their requests."""

import re
from pathlib import Path

import schemathesis
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.core import NOT_SET

DOCS_DIR = Path(__file__).resolve().parents[2] / "docs"
PATH_PARAMETER = re.compile(r"{(\w+)}")


def operations(document: str) -> dict[str, object]:
    """"METHOD /path" -> schemathesis operation, for every operation `document` describes."""
    schema = schemathesis.openapi.from_path(DOCS_DIR / document)
    found = (result.ok() for result in schema.get_all_operations())
    return {f"{operation.method.upper()} {operation.path}": operation for operation in found}


def has_input(operation) -> bool:
    return bool(PATH_PARAMETER.search(operation.path) or operation.query or operation.body)


def cases(operation, known_ids: dict[str, list[int]] | None = None) -> st.SearchStrategy:
    """Requests that fit the document and requests that do not, with path ids drawn at random
    or, as often, from `known_ids` (a random id almost never names a row, so without them the
    fuzz would test the 404 and little else)."""
    modes = [GenerationMode.POSITIVE] + ([GenerationMode.NEGATIVE] if has_input(operation) else [])
    fixed = [{}]
    for name in PATH_PARAMETER.findall(operation.path):
        fixed += [{name: known} for known in (known_ids or {}).get(name, [])]
    return st.one_of(*(operation.as_strategy(mode, path_parameters=ids or None)
                       for mode in modes for ids in fixed))


def described(case) -> str:
    """The request in one line, for a finding."""
    query = f"?{case.query}" if case.query else ""
    body = "" if case.body is NOT_SET else f" {case.body!r}"
    return f"{case.method} {case.formatted_path}{query}{body}"
