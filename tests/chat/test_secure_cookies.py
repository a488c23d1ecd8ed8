"""Over HTTPS, as nginx says it with X-Forwarded-Proto, every cookie the app sets is Secure,
whether or not CHAT_SECURE_COOKIES was set: a browser then never sends them over plain HTTP."""

import json

import pytest
from django.test import AsyncClient

from chatapp import login_limit

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "a-long-test-password"
SIGN_IN_COOKIES = {"sessionid", "csrftoken", login_limit.DEVICE_COOKIE}


async def signed_in_cookies(user, scheme: str) -> dict[str, bool]:
    """Each cookie a sign-in sets, and whether it is Secure, the request said to come over `scheme`."""
    browser = AsyncClient()
    await browser.get("/api/auth/session")
    token = browser.cookies["csrftoken"].value
    answer = await browser.post("/api/auth/login", json.dumps({"username": user.username, "password": PASSWORD}),
                                content_type="application/json",
                                headers={"X-CSRFToken": token, "X-Forwarded-Proto": scheme})
    assert answer.status_code == 200
    return {name: bool(cookie["secure"]) for name, cookie in answer.cookies.items()}


async def test_a_sign_in_over_https_sets_only_secure_cookies_without_chat_secure_cookies(user, settings):
    """Behind TLS without the setting the session cookie went out without Secure, and a browser
    sent it again to any http:// address of the site, readable on the way."""
    settings.SESSION_COOKIE_SECURE = settings.CSRF_COOKIE_SECURE = False

    over_https = await signed_in_cookies(user, "https")
    over_http = await signed_in_cookies(user, "http")

    assert over_https == dict.fromkeys(SIGN_IN_COOKIES, True)
    assert over_http == dict.fromkeys(SIGN_IN_COOKIES, False)
