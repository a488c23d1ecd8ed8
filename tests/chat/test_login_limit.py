"""Failed sign-ins are counted where Django authenticates, so the API and the admin share one count:
per (account, address) pair a hard limit, per account and per address a slower, growing delay.
Beyond either, the API answers 429 with Retry-After and the admin's form says so."""

import asyncio
import json

import httpx2
import pytest
from django.test import AsyncClient, override_settings

from chatapp import login_limit
from tests import factories, servers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("small_login_limits")]

PASSWORD = "a-long-test-password"


async def sign_in(username: str, password: str, address: str = "203.0.113.7"):
    return await AsyncClient().post("/api/auth/login", json.dumps({"username": username, "password": password}),
                                    content_type="application/json", headers={"X-Real-IP": address})


async def test_a_pair_past_its_failed_attempts_answers_429_with_retry_after_even_to_the_right_password(user):
    failures = [(await sign_in(user.username, "wrong")).status_code for _ in range(3)]

    refused = await sign_in(user.username, PASSWORD)

    assert failures == [400, 400, 400]
    assert refused.status_code == 429
    retry_after = int(refused["Retry-After"])
    assert 0 < retry_after <= 300
    assert refused.json()["error"]["code"] == "too_many_attempts"
    assert f"{retry_after} s" in refused.json()["error"]["message"]


@pytest.fixture
def fifty_users(transactional_db):
    return [factories.user() for _ in range(50)]


async def test_fifty_simultaneous_right_passwords_from_one_address_all_sign_in(fifty_users):
    users = fifty_users

    statuses = [r.status_code for r in await asyncio.gather(*(sign_in(u.username, PASSWORD) for u in users))]

    assert statuses == [200] * 50


async def test_a_strangers_failures_from_one_address_do_not_lock_the_account_out_of_another(user):
    for _ in range(3):
        await sign_in(user.username, "wrong", "198.51.100.1")

    assert (await sign_in(user.username, PASSWORD, "198.51.100.1")).status_code == 429
    assert (await sign_in(user.username, PASSWORD, "192.0.2.1")).status_code == 200


async def test_one_address_spraying_many_accounts_is_slowed_there_but_not_elsewhere(user):
    for n in range(6):
        assert (await sign_in(f"someone{n}", "wrong")).status_code == 400

    there = await sign_in(user.username, PASSWORD)
    elsewhere = await sign_in(user.username, PASSWORD, "192.0.2.1")

    assert there.status_code == 429
    assert int(there["Retry-After"]) <= 2  # a delay that grows, not the window's lock
    assert elsewhere.status_code == 200


async def test_a_guesser_spread_over_addresses_slows_new_devices_but_not_the_browser_its_owner_signed_in_from(user):
    """The account's delay had been a switch that locked its owner out: failures from many
    addresses kept even the right password from a fresh address refused (the review, helper 23:
    501 of 600 s). A browser that signed in to the account before holds a signed cookie that
    says so (OWASP's device cookies), and the account's delay does not hold it back."""
    owners_browser = AsyncClient(headers={"X-Real-IP": "192.0.2.50"})
    signed_in = await owners_browser.post("/api/auth/login", json.dumps({"username": user.username, "password": PASSWORD}),
                                          content_type="application/json")
    await owners_browser.post("/api/auth/logout")
    for n in range(8):  # a guesser, one failure from each of many addresses
        await sign_in(user.username, "wrong", f"198.51.100.{n}")

    new_device = await sign_in(user.username, PASSWORD, "192.0.2.77")
    known_device = await owners_browser.post("/api/auth/login", json.dumps({"username": user.username, "password": PASSWORD}),
                                             content_type="application/json", headers={"X-Real-IP": "192.0.2.77"})
    forged = AsyncClient(headers={"X-Real-IP": "192.0.2.78"})
    forged.cookies[login_limit.DEVICE_COOKIE] = "forged:value"
    forged_attempt = await forged.post("/api/auth/login", json.dumps({"username": user.username, "password": PASSWORD}),
                                       content_type="application/json")

    assert signed_in.status_code == 200 and login_limit.DEVICE_COOKIE in signed_in.cookies
    assert new_device.status_code == 429  # slowed: the guesser's tries cost them time
    assert known_device.status_code == 200
    assert forged_attempt.status_code == 429


async def signed_in_before(user, address: str) -> AsyncClient:
    """A browser that signed in to `user`'s account from `address` and out again: it holds the
    account's device cookie."""
    browser = AsyncClient()
    browser.address = address
    signed_in = await sign_in_with(browser, user.username, PASSWORD)
    assert signed_in.status_code == 200 and login_limit.DEVICE_COOKIE in signed_in.cookies
    await browser.post("/api/auth/logout")
    return browser


async def sign_in_with(browser: AsyncClient, username: str, password: str):
    return await browser.post("/api/auth/login", json.dumps({"username": username, "password": password}),
                              content_type="application/json", headers={"X-Real-IP": browser.address})


async def test_a_guesser_at_the_owners_own_address_does_not_hold_back_the_browser_its_owner_signed_in_from(user):
    """Behind a NAT, a proxy or a load balancer in front of nginx, many people share one address:
    anyone there could keep an account's owner out, their own browser too, with three wrong
    passwords (the pair's limit) every window, or a spray of other accounts (the address's
    delay). A known browser is held to a pair of its own, the account and itself."""
    shared = "203.0.113.9"
    owners_browser = await signed_in_before(user, shared)
    for _ in range(3):
        await sign_in(user.username, "wrong", shared)
    for n in range(6):
        await sign_in(f"someone{n}", "wrong", shared)

    new_device = await sign_in(user.username, PASSWORD, shared)
    known_device = await sign_in_with(owners_browser, user.username, PASSWORD)

    assert new_device.status_code == 429
    assert known_device.status_code == 200


async def changed_password(browser: AsyncClient, new_password: str) -> None:
    changed = await browser.post("/api/auth/password", json.dumps({"old_password": PASSWORD, "new_password": new_password}),
                                 content_type="application/json", headers={"X-Real-IP": browser.address})
    assert changed.status_code == 200


async def test_after_a_password_change_another_browsers_device_cookie_no_longer_exempts_it_from_the_address_limit(user):
    """A device cookie vouches for a browser that signed in with the account's password of then:
    one that signed in with a password its owner has changed since (a thief's) is a new device."""
    shared, new_password = "203.0.113.9", "another-long-passphrase"
    other_browser = await signed_in_before(user, shared)
    owners_browser = await signed_in_before(user, "192.0.2.60")
    await sign_in_with(owners_browser, user.username, PASSWORD)
    await changed_password(owners_browser, new_password)
    for n in range(7):
        await sign_in(f"someone{n}", "wrong", shared)

    from_the_other_browser = await sign_in_with(other_browser, user.username, new_password)
    owners_browser.address = shared
    await owners_browser.post("/api/auth/logout")
    from_the_owners_browser = await sign_in_with(owners_browser, user.username, new_password)

    assert from_the_other_browser.status_code == 429
    assert from_the_owners_browser.status_code == 200  # the change gave it a cookie of the new password


async def test_a_known_browser_past_its_failed_attempts_is_refused_as_a_pair_is_and_nobody_else(user):
    owners_browser = await signed_in_before(user, "192.0.2.50")

    failures = [(await sign_in_with(owners_browser, user.username, "wrong")).status_code for _ in range(3)]
    refused = await sign_in_with(owners_browser, user.username, PASSWORD)

    assert failures == [400, 400, 400]
    assert refused.status_code == 429 and 0 < int(refused["Retry-After"]) <= 300
    assert (await sign_in(user.username, PASSWORD, "192.0.2.51")).status_code == 200


async def test_refused_attempts_are_not_counted_so_the_delay_does_not_grow(user):
    for n in range(6):
        await sign_in(f"someone{n}", "wrong")

    waits = [int((await sign_in(f"other{n}", "wrong"))["Retry-After"]) for n in range(5)]

    assert max(waits) <= 2


def test_the_delay_past_the_spread_limit_doubles_with_each_failure_up_to_the_window(settings):
    settings.CHAT_LOGIN_SPREAD_ATTEMPTS, settings.CHAT_LOGIN_WINDOW_SECONDS = 100, 300

    delays = [login_limit.spread_delay(failures) for failures in (99, 100, 101, 102, 105, 130)]

    assert delays == [0, 1, 2, 4, 32, 300]


async def test_the_right_password_right_after_failures_below_the_limit_signs_in(user):
    for _ in range(2):
        await sign_in(user.username, "wrong")

    assert (await sign_in(user.username, PASSWORD)).status_code == 200


async def test_a_burst_of_parallel_wrong_passwords_leaves_the_pair_refused_and_others_open(user):
    statuses = {r.status_code for r in await asyncio.gather(*(sign_in(user.username, "wrong") for _ in range(5)))}

    assert statuses <= {400, 429}
    assert (await sign_in(user.username, PASSWORD)).status_code == 429
    assert (await sign_in(user.username, PASSWORD, "192.0.2.1")).status_code == 200


def test_wrong_passwords_at_the_admin_login_are_refused_and_count_for_the_api_too(client):
    admin = factories.user(is_staff=True, is_superuser=True)
    address = {"HTTP_X_REAL_IP": "203.0.113.7"}

    pages = [client.post("/admin/login/", {"username": admin.username, "password": "wrong"}, **address)
             for _ in range(25)]
    right = client.post("/admin/login/", {"username": admin.username, "password": PASSWORD}, **address)
    api = asyncio.run(sign_in(admin.username, PASSWORD))

    refused = [page for page in pages if "too many failed sign-ins" in page.content.decode()]
    assert len(refused) == 22
    assert "too many failed sign-ins" in right.content.decode()
    assert "_auth_user_id" not in client.session
    assert api.status_code == 429


@pytest.mark.process
def test_every_web_process_sees_the_same_count_through_redis(user, settings):
    if not settings.REDIS_URL:
        pytest.fail("this test needs REDIS_URL: the count is shared through Redis")
    env = {"REDIS_URL": settings.REDIS_URL, "CHAT_LOGIN_ATTEMPTS": "3"}
    database = servers.shared_database_url()
    with servers.daphne_on(database, env=env) as first, servers.daphne_on(database, env=env) as second:
        def sign_in_at(base_url: str, password: str) -> int:
            with httpx2.Client(base_url=base_url) as client:
                client.get("/api/auth/session")
                return client.post("/api/auth/login", json={"username": user.username, "password": password},
                                   headers={"X-CSRFToken": client.cookies["csrftoken"],
                                            "X-Real-IP": "203.0.113.7"}).status_code

        failures = [sign_in_at(url, "wrong") for url in (first, second, first)]

        assert failures == [400, 400, 400]
        assert (sign_in_at(second, PASSWORD), sign_in_at(first, PASSWORD)) == (429, 429)


async def test_without_its_cache_the_limit_lets_sign_ins_through_and_passwords_are_still_checked(user):
    dead_cache = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                              "LOCATION": "redis://127.0.0.1:9/0"}}  # nothing listens there
    with override_settings(CACHES=dead_cache):
        wrong = [(await sign_in(user.username, "wrong")).status_code for _ in range(5)]
        right = await sign_in(user.username, PASSWORD)

    assert (wrong, right.status_code) == ([400] * 5, 200)
