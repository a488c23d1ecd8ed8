"""The chat page works under its Content-Security-Policy: nothing it does is refused."""

import pytest

from harness.page_probes import last_answer, send, wait_for_end
from tests import factories
from tests.browser.conftest import PASSWORD, sign_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# Every refusal the policy makes in the page, reported or not in the console.
VIOLATION_PROBE = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.__violations.push(`${event.violatedDirective} ${event.blockedURI}`);
});
"""


def test_the_page_signs_in_streams_and_renders_an_answer_with_no_policy_violation(
        page, stack_with_fake_upstream, user, upstream):
    upstream.script.chunks = ["Some ", "**bold** ", "code:\n\n", "```python\n", "x = 1\n", "```\n"]
    page.add_init_script(VIOLATION_PROBE)
    response = page.goto(stack_with_fake_upstream + "/")
    policy = response.headers["content-security-policy"]

    sign_in(page, stack_with_fake_upstream, user)
    send(page, "Show me")
    wait_for_end(page)
    page.click("#composer")  # the composer resizes itself through CSSOM, which the policy allows

    answer = last_answer(page)
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert answer.get_attribute("data-status") == "completed"
    assert answer.locator("pre code.hljs").count() == 1
    assert page.evaluate("window.__violations") == []
    assert page.console_errors == []


def test_the_staff_pages_and_the_admin_carry_a_policy_and_break_none_of_it(
        page, stack_with_fake_upstream, user):
    conversation = factories.conversation(owner=user, title="Reviewed")
    factories.generation(factories.message(conversation, role="assistant", content="An answer."),
                         finish_reason="stop", final_text="An answer.")
    staff = factories.user(is_staff=True, is_superuser=True, password=PASSWORD)
    page.add_init_script(VIOLATION_PROBE)
    page.goto(stack_with_fake_upstream + "/admin/login/")
    page.fill("#id_username", staff.username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#content")

    policies = {}
    for path in ["/admin/", "/admin/chatapp/generation/", "/admin/chatapp/conversation/",
                 f"/admin/chatapp/conversation/{conversation.pk}/change/", "/staff/audit/",
                 "/staff/live/"]:
        response = page.goto(stack_with_fake_upstream + path)
        page.wait_for_load_state("load")
        policies[path] = response.headers.get("content-security-policy", "")

    assert all("script-src 'self'" in policy and "frame-ancestors 'none'" in policy
               for policy in policies.values()), policies
    assert page.evaluate("window.__violations") == []
    assert page.console_errors == []
