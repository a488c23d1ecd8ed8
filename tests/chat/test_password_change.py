"""A signed-in user changes their own password (POST /api/auth/password): the current one proves
who asks, and a wrong one is a failed sign-in, held to the same limit (chatapp/login_limit.py);
the new one must pass AUTH_PASSWORD_VALIDATORS; the session that changed it stays signed in and
every other session of the user ends."""

import json

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.db import connections
from django.test import AsyncClient

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("small_login_limits")]

PASSWORD = "a-long-test-password"
NEW_PASSWORD = "another-long-passphrase"
ADDRESS = "203.0.113.7"


@pytest.fixture(autouse=True)
async def connections_closed():
    yield
    # The views' sessions and the checks below ran queries on asgiref's worker thread: closed,
    # or the test database cannot be dropped at the end.
    await sync_to_async(connections.close_all)()


async def signed_in_browser(user, **options) -> AsyncClient:
    browser = AsyncClient(**options)
    await browser.aforce_login(user)
    return browser


async def change_password(browser: AsyncClient, old: str, new: str = NEW_PASSWORD, csrf_token: str | None = None):
    headers = {"X-Real-IP": ADDRESS, **({"X-CSRFToken": csrf_token} if csrf_token else {})}
    return await browser.post("/api/auth/password", json.dumps({"old_password": old, "new_password": new}),
                              content_type="application/json", headers=headers)


async def sign_in(username: str, password: str):
    return await AsyncClient().post("/api/auth/login", json.dumps({"username": username, "password": password}),
                                    content_type="application/json", headers={"X-Real-IP": "192.0.2.1"})


async def password_is(user, password: str) -> bool:
    fresh = await get_user_model().objects.aget(pk=user.pk)
    return await sync_to_async(fresh.check_password)(password)


async def test_the_password_changes_this_session_stays_signed_in_and_every_other_session_ends(user):
    here, elsewhere = await signed_in_browser(user), await signed_in_browser(user)

    changed = await change_password(here, PASSWORD)

    assert changed.status_code == 200 and changed.json()["user"]["username"] == user.username
    assert (await here.get("/api/conversations")).status_code == 200
    assert (await here.get("/api/auth/session")).json()["user"]["id"] == user.pk
    signed_out = await elsewhere.get("/api/conversations")
    assert signed_out.status_code == 401 and signed_out.json()["error"]["code"] == "not_authenticated"
    assert (await elsewhere.get("/api/auth/session")).json()["user"] is None


async def test_after_the_change_the_new_password_signs_in_and_the_old_one_does_not(user):
    await change_password(await signed_in_browser(user), PASSWORD)

    old, new = await sign_in(user.username, PASSWORD), await sign_in(user.username, NEW_PASSWORD)

    assert old.status_code == 400 and old.json()["error"]["code"] == "invalid_credentials"
    assert new.status_code == 200


async def test_a_wrong_current_password_is_refused_and_changes_nothing(user):
    here, elsewhere = await signed_in_browser(user), await signed_in_browser(user)

    refused = await change_password(here, "not-my-password")

    assert refused.status_code == 400 and refused.json()["error"]["code"] == "wrong_password"
    assert await password_is(user, PASSWORD)
    assert (await elsewhere.get("/api/conversations")).status_code == 200
    assert (await here.get("/api/conversations")).status_code == 200  # a wrong guess signs nobody out


async def test_wrong_current_passwords_count_as_failed_sign_ins_until_429(user):
    browser = await signed_in_browser(user)

    failures = [(await change_password(browser, "wrong")).status_code for _ in range(3)]
    refused = await change_password(browser, PASSWORD)
    sign_in_there = await AsyncClient().post(
        "/api/auth/login", json.dumps({"username": user.username, "password": PASSWORD}),
        content_type="application/json", headers={"X-Real-IP": ADDRESS})

    assert failures == [400, 400, 400]
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "too_many_attempts"
    assert 0 < int(refused["Retry-After"]) <= 300
    assert await password_is(user, PASSWORD)  # even the right one is not checked until the window ends
    assert sign_in_there.status_code == 429  # one count, whichever way the guesses came


async def test_failed_sign_ins_hold_back_the_password_change_too(user):
    for _ in range(3):
        await AsyncClient().post("/api/auth/login", json.dumps({"username": user.username, "password": "wrong"}),
                                 content_type="application/json", headers={"X-Real-IP": ADDRESS})

    refused = await change_password(await signed_in_browser(user), PASSWORD)

    assert refused.status_code == 429 and await password_is(user, PASSWORD)


@pytest.mark.parametrize("new, refusal", [
    ("2718281828", "This password is entirely numeric."),
    ("short", "This password is too short. It must contain at least 8 characters."),
    ("password123", "This password is too common."),
])
async def test_a_new_password_the_validators_refuse_is_400_with_their_words(user, new, refusal):
    here, elsewhere = await signed_in_browser(user), await signed_in_browser(user)

    refused = await change_password(here, PASSWORD, new)

    error = refused.json()["error"]
    assert refused.status_code == 400 and error["code"] == "invalid_password"
    assert refusal in error["details"] and refusal in error["message"]
    assert await password_is(user, PASSWORD)
    assert (await elsewhere.get("/api/conversations")).status_code == 200


async def test_a_new_password_like_the_username_is_refused(transactional_db):
    user = await sync_to_async(get_user_model().objects.create_user)(username="marguerite", password=PASSWORD)

    refused = await change_password(await signed_in_browser(user), PASSWORD, "marguerite1")

    assert refused.json()["error"]["details"] == ["The password is too similar to the username."]


async def test_the_change_needs_the_csrf_token(user):
    browser = await signed_in_browser(user, enforce_csrf_checks=True)
    await browser.get("/api/auth/session")

    forged = await change_password(browser, PASSWORD)
    token = browser.cookies["csrftoken"].value
    changed = await change_password(browser, PASSWORD, csrf_token=token)

    assert forged.status_code == 403 and forged.json()["error"]["code"] == "csrf_failed"
    assert changed.status_code == 200


async def test_nobody_signed_in_may_change_a_password(user):
    refused = await change_password(AsyncClient(), PASSWORD)

    assert refused.status_code == 401 and refused.json()["error"]["code"] == "not_authenticated"
    assert await password_is(user, PASSWORD)


@pytest.mark.parametrize("body", [{"new_password": NEW_PASSWORD}, {"old_password": PASSWORD},
                                  {"old_password": None, "new_password": NEW_PASSWORD},
                                  {"old_password": PASSWORD, "new_password": 12345678}])
async def test_a_missing_or_non_string_field_is_400_and_no_failed_sign_in(user, body):
    browser = await signed_in_browser(user)

    refused = [await browser.post("/api/auth/password", json.dumps(body), content_type="application/json")
               for _ in range(4)]

    assert {(r.status_code, r.json()["error"]["code"]) for r in refused} == {(400, "invalid_value")}
    assert (await change_password(browser, PASSWORD)).status_code == 200
