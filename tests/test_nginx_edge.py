"""nginx serves the browser's files only, each with the headers that keep the page to itself."""

import httpx2
import pytest

# favicon.ico: what a browser asks for on pages that name no icon (Django's admin, the staff pages).
APP_FILES = ["/", "/index.html", "/app.js", "/style.css", "/staff.css", "/favicon.svg", "/favicon.ico", "/vendor/marked.js"]
NOT_FOR_BROWSERS = ["/package.json", "/package-lock.json", "/tests/api.test.mjs", "/tests/helpers.mjs",
                    "/scripts/vendor.mjs", "/node_modules/dompurify/package.json", "/vendor/README.md",
                    "/.gitignore", "/vendor/../package.json"]


@pytest.mark.parametrize("path", APP_FILES)
def test_each_app_file_carries_the_security_headers(nginx_in_front, path):
    port = nginx_in_front()

    response = httpx2.get(f"http://127.0.0.1:{port}{path}")

    policy = response.headers["content-security-policy"]
    assert response.status_code == 200
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert "unsafe-inline" not in policy
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "same-origin"


@pytest.mark.parametrize("path", NOT_FOR_BROWSERS)
def test_files_a_browser_never_needs_are_not_served(nginx_in_front, path):
    port = nginx_in_front()

    response = httpx2.get(f"http://127.0.0.1:{port}{path}")

    assert response.status_code == 404
    assert response.headers["x-content-type-options"] == "nosniff"


def test_the_api_keeps_djangos_headers_without_duplicates(nginx_in_front):
    port = nginx_in_front()

    response = httpx2.get(f"http://127.0.0.1:{port}/api/auth/session")

    assert response.headers.get_list("x-frame-options") == ["DENY"]
    assert response.headers.get_list("x-content-type-options") == ["nosniff"]


def test_a_clients_own_claim_of_https_is_not_believed_behind_nginx(nginx_in_front, probe_app_port):
    """The app takes X-Forwarded-Proto from its proxy (its cookies are Secure over HTTPS);
    nginx sets the header to the scheme it served, whatever the client sent."""
    claims_https = {"X-Forwarded-Proto": "https"}

    direct = httpx2.get(f"http://127.0.0.1:{probe_app_port}/api/auth/session", headers=claims_https)
    behind_nginx = httpx2.get(f"http://127.0.0.1:{nginx_in_front()}/api/auth/session", headers=claims_https)

    assert "; secure" in direct.headers["set-cookie"].lower()
    assert "csrftoken=" in behind_nginx.headers["set-cookie"]
    assert "secure" not in behind_nginx.headers["set-cookie"].lower()
