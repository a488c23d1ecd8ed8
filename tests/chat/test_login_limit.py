"""Failed sign-ins are limited per account and per address; beyond, login answers 429 with Retry-After."""

import asyncio
import json

import pytest
from django.core.cache import cache
from django.test import AsyncClient, override_settings

from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def three_attempts(settings):
    settings.CHAT_LOGIN_ATTEMPTS = 3
    settings.CHAT_LOGIN_WINDOW_SECONDS = 300
    cache.clear()
    yield
    cache.clear()


async def sign_in(username: str, password: str, address: str = "203.0.113.7"):
    return await AsyncClient().post("/api/auth/login", json.dumps({"username": username, "password": password}),
                                    content_type="application/json", headers={"X-Real-IP": address})


async def test_an_account_past_its_failed_attempts_answers_429_with_retry_after_even_to_the_right_password(user):
    failures = [(await sign_in(user.username, "wrong", f"198.51.100.{n}")).status_code for n in range(3)]

    refused = await sign_in(user.username, "a-long-test-password", "198.51.100.99")

    assert failures == [400, 400, 400]
    assert refused.status_code == 429
    retry_after = int(refused["Retry-After"])
    assert 0 < retry_after <= 300
    assert refused.json()["error"]["code"] == "too_many_attempts"
    assert f"{retry_after} s" in refused.json()["error"]["message"]


async def test_one_address_trying_many_accounts_is_refused_there_but_not_elsewhere(user):
    for n in range(3):
        await sign_in(f"someone{n}", "wrong")

    there = await sign_in(user.username, "a-long-test-password")
    elsewhere = await sign_in(user.username, "a-long-test-password", "192.0.2.1")

    assert there.status_code == 429
    assert elsewhere.status_code == 200


async def test_failures_below_the_limit_still_let_the_right_password_in(user):
    for _ in range(2):
        await sign_in(user.username, "wrong")

    assert (await sign_in(user.username, "a-long-test-password")).status_code == 200


async def test_without_its_cache_the_limit_lets_sign_ins_through_and_passwords_are_still_checked(user):
    dead_cache = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                              "LOCATION": "redis://127.0.0.1:9/0"}}  # nothing listens there
    with override_settings(CACHES=dead_cache):
        wrong = await sign_in(user.username, "wrong")
        right = await sign_in(user.username, "a-long-test-password")

    assert (wrong.status_code, right.status_code) == (400, 200)


async def test_a_burst_of_parallel_wrong_passwords_gets_no_more_tries_than_the_limit(user):
    statuses = [r.status_code for r in await asyncio.gather(
        *(sign_in(user.username, "wrong", f"198.51.100.{n}") for n in range(12)))]

    assert statuses.count(400) == 3 and statuses.count(429) == 9
