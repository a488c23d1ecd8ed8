"""The chat page works under its Content-Security-Policy: nothing it does is refused."""

import pytest

from harness.page_probes import last_answer, send, wait_for_end
from tests.browser.conftest import sign_in

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
