"""Every error under /api/ answers `{"error": {"code", "message"}}`, whether Django or nginx gives
it, on daphne directly and behind nginx; pages outside /api/ keep their HTML."""

import json
import socket

import httpx2
import pytest

from harness import child_process, ports
from stack import nginx


# Past nginx's client_max_body_size (2m) and Django's DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB).
TOO_LARGE = b'{"username": "' + b"x" * (3 * 1024 * 1024) + b'"}'


def csrf_client(base_url: str) -> httpx2.Client:
    client = httpx2.Client(base_url=base_url, timeout=30)
    client.get("/api/auth/session")
    client.headers["X-CSRFToken"] = client.cookies["csrftoken"]
    return client


def unmatched_path(base_url):
    return httpx2.get(f"{base_url}/api/conversations/abc")


def unknown_endpoint(base_url):
    return httpx2.get(f"{base_url}/api/no-such-thing")


def missing_csrf_token(base_url):
    return httpx2.post(f"{base_url}/api/conversations", json={"title": "x"})


def stale_csrf_token(base_url):
    client = csrf_client(base_url)
    client.headers["X-CSRFToken"] = "x" * 32
    return client.post("/api/auth/logout")


def wrong_method(base_url):
    return csrf_client(base_url).put("/api/auth/session")


def trace(base_url):
    return httpx2.request("TRACE", f"{base_url}/api/auth/session")


def body_too_large(base_url):
    return csrf_client(base_url).post("/api/auth/login", content=TOO_LARGE,
                                      headers={"Content-Type": "application/json"})


def host_not_allowed(base_url):
    return httpx2.get(f"{base_url}/api/auth/session", headers={"Host": "elsewhere.example"})


def server_error(base_url):
    return httpx2.get(f"{base_url}/api/_probe/error")


def a_form_with_files(base_url):
    # Django's CSRF check parses such a body for its token, after which it cannot be read again.
    return csrf_client(base_url).post("/api/auth/login", files={"username": ("name.txt", b"alice")})


def a_form_nobody_can_parse(base_url):
    # Twisted, under daphne, parses a form body itself unless told not to, and answered a bare 400
    return csrf_client(base_url).post("/api/auth/login", content=b"no parts here",
                                      headers={"Content-Type": "multipart/form-data"})


def a_head_past_16_kb(base_url):
    # Within nginx's reading of a request head (lines of up to 8 KB, 32 KB in all), past
    # Twisted's 16 KB under daphne, which answered a bare 400 with no body.
    return httpx2.get(f"{base_url}/api/no-such-thing", headers={f"X-Filler-{i}": "x" * 900 for i in range(20)})


def over_500_header_lines(base_url):
    # As many lines as nginx reads, past Twisted's 500, which answered the same bare 400.
    return httpx2.get(f"{base_url}/api/no-such-thing", headers=[(f"X-Filler-{i}", "x") for i in range(600)])


CASES = {
    unmatched_path: (404, "not_found"),
    unknown_endpoint: (404, "not_found"),
    missing_csrf_token: (403, "csrf_failed"),
    stale_csrf_token: (403, "csrf_failed"),
    wrong_method: (405, "method_not_allowed"),
    trace: (405, "method_not_allowed"),
    body_too_large: (413, "body_too_large"),
    host_not_allowed: (400, "bad_request"),
    server_error: (500, "server_error"),
    a_form_with_files: (415, "unsupported_media_type"),
    a_form_nobody_can_parse: (400, "bad_request"),
    a_head_past_16_kb: (404, "not_found"),
    over_500_header_lines: (404, "not_found"),
}


def assert_json_error(response: httpx2.Response, status: int, code: str) -> None:
    assert response.status_code == status
    assert response.headers["content-type"].startswith("application/json"), response.text[:200]
    error = response.json()["error"]
    assert error["code"] == code
    assert isinstance(error["message"], str) and error["message"]


@pytest.mark.parametrize("request_", CASES, ids=lambda case: case.__name__)
def test_each_error_on_daphne_directly_is_json(probe_app_port, request_):
    assert_json_error(request_(f"http://127.0.0.1:{probe_app_port}"), *CASES[request_])


@pytest.mark.parametrize("request_", CASES, ids=lambda case: case.__name__)
def test_each_error_behind_nginx_is_json(nginx_in_front, request_):
    assert_json_error(request_(f"http://127.0.0.1:{nginx_in_front()}"), *CASES[request_])


def test_nginxs_own_bad_request_is_json_under_the_api_and_its_page_elsewhere(nginx_in_front):
    port = nginx_in_front()
    too_large = {"Cookie": "x" * 40_000}

    api = httpx2.get(f"http://127.0.0.1:{port}/api/auth/session", headers=too_large)
    page = httpx2.get(f"http://127.0.0.1:{port}/", headers=too_large)

    assert_json_error(api, 400, "bad_request")
    assert (page.status_code, page.headers["content-type"]) == (400, "text/html")


def test_an_address_too_long_for_nginx_is_json_under_the_api_and_its_page_elsewhere(nginx_in_front):
    port = nginx_in_front()
    long_query = "?q=" + "x" * 20_000  # past nginx's 8 KB for a request line

    api = httpx2.get(f"http://127.0.0.1:{port}/api/conversations{long_query}")
    page = httpx2.get(f"http://127.0.0.1:{port}/{long_query}")

    assert_json_error(api, 414, "uri_too_long")
    assert (page.status_code, page.headers["content-type"]) == (414, "text/html")


def raw_request(port: int, request_line: str, *headers: str) -> tuple[int, str, bytes]:
    """Status, content type and body of a request no HTTP client would send (nginx closes after it)."""
    lines = [request_line, f"Host: 127.0.0.1:{port}", "Connection: close", *headers, "", ""]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall("\r\n".join(lines).encode("utf-8", "surrogateescape"))  # "\udcff": byte 0xff
        answer = b"".join(iter(lambda: connection.recv(65536), b""))
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *fields = head.decode().split("\r\n")
    content_type = next((f.split(":", 1)[1].strip() for f in fields if f.lower().startswith("content-type:")), "")
    return int(status_line.split()[1]), content_type, body


# Requests nginx refuses while reading them, some before it has a path to go by: the status
# nginx gives each, and the request.
UNREADABLE = {
    "a NUL in the path": (400, "GET {prefix}%00 HTTP/1.1"),
    "a broken escape in the path": (400, "GET {prefix}%zz HTTP/1.1"),
    "a NUL in an absolute address": (400, "GET http://127.0.0.1{prefix}%00 HTTP/1.1"),
    "a transfer coding nginx does not know": (501, "POST {prefix}auth/login HTTP/1.1", "Transfer-Encoding: gzip"),
    "an HTTP version nginx does not speak": (505, "GET {prefix}auth/session HTTP/2.0"),
    "a method in lower case": (400, "get {prefix}auth/session HTTP/1.1"),
    "a tab after the method": (400, "GET\t {prefix}auth/session HTTP/1.1"),
}


@pytest.mark.parametrize("case", UNREADABLE.values(), ids=UNREADABLE.keys())
def test_a_request_nginx_cannot_read_is_json_under_the_api_and_its_page_elsewhere(nginx_in_front, case):
    port = nginx_in_front()
    status, request_line, *headers = case

    api_status, api_type, api_body = raw_request(port, request_line.format(prefix="/api/"), *headers)
    page_status, page_type, _ = raw_request(port, request_line.format(prefix="/"), *headers)

    assert (api_status, api_type) == (status, "application/json"), api_body[:200]
    assert json.loads(api_body)["error"]["code"] == "bad_request"
    assert (page_status, page_type) == (status, "text/html")


# Bytes no browser sends unescaped (curl and scripts do): the app answers them as it answers
# the same address percent-escaped. The status Django gives each, and its code.
UNESCAPED = {
    "UTF-8 in the query": ("GET /api/no-such-thing?q=café HTTP/1.1", 404, "not_found"),
    "UTF-8 in the path": ("GET /api/café HTTP/1.1", 404, "not_found"),
    "a byte that is no UTF-8 in the path": ("GET /api/\udcff HTTP/1.1", 404, "not_found"),
    "UTF-8 in the query of an endpoint": ("GET /api/conversations?q=日本 HTTP/1.1", 401, "not_authenticated"),
}


@pytest.mark.parametrize("case", UNESCAPED.values(), ids=UNESCAPED.keys())
def test_an_address_with_unescaped_bytes_is_answered_by_the_app_on_daphne_and_behind_nginx(
        nginx_in_front, probe_app_port, case):
    request_line, status, code = case
    for port in (probe_app_port, nginx_in_front()):
        answer_status, content_type, body = raw_request(port, request_line)

        assert (answer_status, content_type) == (status, "application/json"), body[:200]
        assert json.loads(body)["error"]["code"] == code


# Addresses nginx sends to its /api/ location once it has merged their slashes and resolved their
# dot segments (a client that joins a base ending in "/" to "/api/..."), passed on as sent.
UNNORMALIZED = {
    "a doubled slash": "GET //api/no-such-thing HTTP/1.1",
    "a dot segment": "GET /./api/no-such-thing HTTP/1.1",
    "out of the static files' folder": "GET /static/../api/no-such-thing HTTP/1.1",
}


@pytest.mark.parametrize("request_line", UNNORMALIZED.values(), ids=UNNORMALIZED.keys())
def test_an_address_nginx_reads_as_the_apis_is_answered_as_the_apis_on_daphne_and_behind_nginx(
        nginx_in_front, probe_app_port, request_line):
    for port in (probe_app_port, nginx_in_front()):
        status, content_type, body = raw_request(port, request_line)

        assert (status, content_type) == (404, "application/json"), body[:200]
        assert json.loads(body)["error"]["code"] == "not_found"


def test_nginx_with_no_web_process_to_reach_answers_json_under_the_api(nginx_binary, tmp_path):
    port, nobody_listens = ports.free_port(), ports.free_port()
    site = nginx.NginxSite(listen=f"127.0.0.1:{port}", upstreams=(f"127.0.0.1:{nobody_listens}",))
    config = nginx.render(site, tmp_path / "nginx")
    with child_process.running(nginx.command(config), ready_url=f"http://127.0.0.1:{port}/index.html"):
        response = httpx2.get(f"http://127.0.0.1:{port}/api/auth/session")

    assert_json_error(response, 502, "server_unreachable")


@pytest.mark.parametrize("path", ["/static/../healthz", "/static/../../../etc/passwd", "/static/x/../../admin/"])
def test_a_static_files_address_that_climbs_out_of_their_folder_is_a_404_page_not_a_500(probe_app_port, path):
    # Without nginx (`make run` on a machine without it) daphne's own static files handler
    # answers /static/; behind nginx it still sees the path as sent.
    status, content_type, body = raw_request(probe_app_port, f"GET {path} HTTP/1.1")

    assert (status, content_type) == (404, "text/html; charset=utf-8"), body[:200]


@pytest.mark.parametrize("path", ["/static/admin/css/base.css", "/static//admin/css/base.css",
                                  "/static/x/../admin/css/base.css", "/static/../static/admin/css/base.css"])
def test_daphne_alone_serves_a_static_file_at_each_address_nginx_would_serve_it_at(probe_app_port, path):
    status, content_type, _ = raw_request(probe_app_port, f"GET {path} HTTP/1.1")

    assert (status, content_type) == (200, "text/css")


def test_pages_outside_the_api_keep_djangos_html(probe_app_port):
    base_url = f"http://127.0.0.1:{probe_app_port}"

    missing = httpx2.get(f"{base_url}/staff/nothing-here")
    forged = httpx2.post(f"{base_url}/admin/login/", data={"username": "x", "password": "y"})

    assert (missing.status_code, forged.status_code) == (404, 403)
    assert missing.headers["content-type"].startswith("text/html")
    assert forged.headers["content-type"].startswith("text/html")
