"""The keyboard's focus ring in a real browser: drawn whole around the control that has it, not
cut off by a scrolling list or a code block that holds the control."""

import pytest

from harness.page_probes import send, wait_for_end
from tests import factories
from tests.browser.conftest import sign_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# The focused control's ring (its box grown by the outline's width and offset), and the
# ancestors that clip what overflows them, where the ring crosses their edge.
CLIPPED_RING = """() => {
  const el = document.activeElement;
  const style = getComputedStyle(el);
  const reach = parseFloat(style.outlineWidth) + parseFloat(style.outlineOffset);
  const box = el.getBoundingClientRect();
  const ring = { left: box.left - reach, top: box.top - reach, right: box.right + reach, bottom: box.bottom + reach };
  const cut = [];
  for (let up = el.parentElement; up; up = up.parentElement) {
    const { overflowX, overflowY } = getComputedStyle(up);
    if (overflowX === "visible" && overflowY === "visible") continue;
    const edge = up.getBoundingClientRect();
    const inside = { left: edge.left + up.clientLeft, top: edge.top + up.clientTop };
    inside.right = inside.left + up.clientWidth;
    inside.bottom = inside.top + up.clientHeight;
    if (ring.left < inside.left - 0.5 || ring.top < inside.top - 0.5
        || ring.right > inside.right + 0.5 || ring.bottom > inside.bottom + 0.5) {
      cut.push(`${el.className || el.tagName} cut by ${up.id || up.className}`);
    }
  }
  return style.outlineStyle === "none" ? [`${el.className || el.tagName} has no ring`] : cut;
}"""


@pytest.fixture
def chat(page, stack_with_fake_upstream, user, upstream):
    sign_in(page, stack_with_fake_upstream, user)
    return page


def rings_cut_tabbing(page, start: str, presses: int) -> list:
    """Tabs `presses` times from `start`, and the rings cut on the way."""
    page.focus(start)
    cut = []
    for _ in range(presses):
        page.keyboard.press("Tab")
        cut += page.evaluate(CLIPPED_RING)
    return cut


def test_each_conversation_and_its_rename_and_delete_show_their_whole_ring(chat, user):
    for n in range(2):
        factories.conversation(owner=user, title=f"Listed {n}")
    chat.reload()
    chat.wait_for_selector("#conversation-list li:nth-child(2)")

    cut = rings_cut_tabbing(chat, "#conversation-search", 6)  # two items, three controls each

    assert cut == []


def test_a_code_blocks_copy_button_shows_its_whole_ring(chat, upstream):
    upstream.script.chunks = ["```python\nprint('hi')\n```"]
    send(chat, "Some code")
    wait_for_end(chat)

    cut = rings_cut_tabbing(chat, "#messages", 3)  # Edit, then the code block's Copy, Copy answer

    assert chat.locator(".code-toolbar button").count() == 1
    assert cut == []
