"""Every error code the server (chatapp/ and nginx) answers or streams has a sentence for people
in the page."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ERRORS_JS = ROOT / "frontend" / "errors.js"

# How chatapp/ names a code: ApiError(400, "code", ...), UpstreamRefused(503, "code", ...),
# UpstreamBroken("code", ...), error_response(429, "code", ...), error_code="code".
RAISED_CODE = re.compile(
    r'(?:ApiError|UpstreamRefused|error_response)\(\s*\d+,\s*"(\w+)"'
    r'|UpstreamBroken\(\s*"(\w+)"'
    r'|error_code="(\w+)"')
# How nginx names one: return 413 '{"error": {"code": "body_too_large", ...}}'.
NGINX_CODE = re.compile(r'return \d+ \'\{"error": \{"code": "(\w+)"')
# What the page's api.js makes up itself (its http_error is worded by the HTTP status instead).
PAGE_CODES = {"not_a_stream"}


def server_codes() -> set[str]:
    codes = set()
    for path in (ROOT / "chatapp").rglob("*.py"):
        for match in RAISED_CODE.finditer(path.read_text()):
            codes.add(next(group for group in match.groups() if group))
    for path in (ROOT / "nginx").glob("*.template"):
        codes.update(NGINX_CODE.findall(path.read_text()))
    return codes


def sentence_codes() -> set[str]:
    source = ERRORS_JS.read_text()
    table = re.search(r"const SENTENCES = \{(.*?)\n\};", source, re.S)
    assert table, "frontend/errors.js has no SENTENCES table"
    return set(re.findall(r"^  (\w+):", table.group(1), re.M))


def test_the_scan_finds_the_codes_it_should():
    assert {"message_too_long", "upstream_busy", "upstream_disconnected", "interrupted",
            "too_many_attempts", "not_found", "csrf_failed", "server_error",
            "server_unreachable"} <= server_codes()


def test_every_code_the_server_or_the_page_can_raise_has_a_sentence():
    missing = (server_codes() | PAGE_CODES) - sentence_codes()
    assert not missing, f"frontend/errors.js has no sentence for {sorted(missing)}"
