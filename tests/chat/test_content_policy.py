"""Where daphne serves the public port itself (`make run` without nginx), its answers carry the
Content-Security-Policy nginx's do: the page's second line of defence against an answer's
Markdown does not depend on which of the two stands in front."""

import re

import pytest
from django.conf import settings

from stack.nginx import TEMPLATES_DIR
from tests import factories

pytestmark = pytest.mark.django_db

NGINX_POLICIES = re.findall(r'add_header Content-Security-Policy "([^"]*)" always;',
                            (TEMPLATES_DIR / "chatapp.conf.template").read_text())


@pytest.mark.parametrize("path", ["/", "/app.js", "/style.css", "/vendor/marked.js"])
def test_the_front_ends_files_carry_the_policy_nginx_sends_with_them(client, path):
    response = client.get(path)

    assert response.status_code == 200
    assert response.headers["Content-Security-Policy"] == settings.CHAT_FRONT_END_POLICY
    assert "unsafe-inline" not in response.headers["Content-Security-Policy"]


@pytest.mark.parametrize("path", ["/admin/login/", "/staff/audit/", "/staff/live/", "/api/auth/session",
                                  "/no-such-page"])
def test_djangos_pages_and_answers_carry_the_pages_policy(client, path):
    client.force_login(factories.staff_member(is_superuser=True))

    response = client.get(path)

    assert response.headers["Content-Security-Policy"] == settings.CHAT_PAGES_POLICY
    assert "script-src 'self'" in settings.CHAT_PAGES_POLICY
    assert "frame-ancestors 'none'" in settings.CHAT_PAGES_POLICY


def test_nginx_sends_the_front_ends_policy_with_the_files_it_serves_and_leaves_djangos_to_django():
    assert NGINX_POLICIES == [settings.CHAT_FRONT_END_POLICY]
