"""Colour contrast in a real browser, light and dark: the colours Chromium computes for the page,
measured as WCAG 2.1 measures them (AA: 4.5:1 for text, 3:1 for a focus indicator)."""

import pytest

from harness.page_probes import send, wait_for_end
from tests.browser.conftest import sign_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

THEMES = ["light", "dark"]

# WCAG 2.1's relative luminance and contrast ratio, of two computed `rgb(...)` colours.
CONTRAST = """
const channel = (c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
const rgb = (css) => css.match(/[\\d.]+/g).slice(0, 3).map(Number);
const luminance = (css) => { const [r, g, b] = rgb(css).map(channel); return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
const contrast = (a, b) => { const [hi, lo] = [luminance(a), luminance(b)].sort((x, y) => y - x); return (hi + 0.05) / (lo + 0.05); };
/** The colour behind `el`: the nearest ancestor's background that is not transparent. */
const backgroundOf = (el) => {
  for (let e = el; e; e = e.parentElement) {
    const bg = getComputedStyle(e).backgroundColor;
    if (!/rgba\\(.*, 0\\)$/.test(bg) && bg !== "transparent") return bg;
  }
  return "rgb(255, 255, 255)";
};
"""

CODE = """```python
import os

def answer(question: str) -> int:
    # the comment a reader skips
    print("forty-two", len(question))
    return 42
```

```html
<div class="box">text</div>
```

```diff
- the old line
+ the new line
```

```markdown
# A section
```"""


@pytest.fixture
def chat(page, stack_with_fake_upstream, user, upstream):
    sign_in(page, stack_with_fake_upstream, user)
    return page


@pytest.mark.parametrize("theme", THEMES)
def test_every_highlighted_word_in_a_code_block_reads_at_4_5_to_1_against_its_background(chat, upstream, theme):
    chat.emulate_media(color_scheme=theme)
    upstream.script.chunks = [CODE]
    send(chat, "Show me some code")
    wait_for_end(chat)

    faint = chat.evaluate("() => {" + CONTRAST + """
        return [...document.querySelectorAll('.code-block code [class^="hljs-"]')]
          .map((el) => [el.className, el.textContent, contrast(getComputedStyle(el).color, backgroundOf(el))])
          .filter(([, , ratio]) => ratio < 4.5)
          .map(([kind, text, ratio]) => `${kind} "${text}" ${ratio.toFixed(2)}:1`); }""")
    highlighted = chat.locator('.code-block code [class^="hljs-"]').count()

    assert highlighted >= 10  # keywords, a string, a comment, a built-in, tags, a diff, a heading
    assert faint == []


@pytest.mark.parametrize("theme", THEMES)
def test_the_focus_ring_stands_out_at_3_to_1_from_what_lies_around_it(chat, theme):
    chat.emulate_media(color_scheme=theme)
    places = ["#composer", "#new-conversation", "#settings-toggle", "#logout"]

    weak = []
    for selector in places:
        chat.focus(selector)
        chat.keyboard.press("Shift+Tab")  # the keyboard's focus, so :focus-visible applies
        chat.keyboard.press("Tab")
        weak += chat.evaluate("(selector) => {" + CONTRAST + """
            const el = document.activeElement;
            const style = getComputedStyle(el);
            const ratio = contrast(style.outlineColor, backgroundOf(el.parentElement));
            return style.outlineStyle === "none" || ratio < 3 ? [`${selector} ${ratio.toFixed(2)}:1`] : [];
        }""", selector)

    assert weak == []


@pytest.mark.parametrize("theme", THEMES)
def test_the_placeholders_read_at_4_5_to_1_the_settings_defaults_among_them(chat, theme):
    chat.emulate_media(color_scheme=theme)
    chat.click("#settings-toggle")

    faint = chat.evaluate("() => {" + CONTRAST + """
        return [...document.querySelectorAll('[placeholder]')]
          .map((el) => [el.id, contrast(getComputedStyle(el, '::placeholder').color, backgroundOf(el))])
          .filter(([, ratio]) => ratio < 4.5)
          .map(([id, ratio]) => `#${id} ${ratio.toFixed(2)}:1`); }""")

    assert faint == []


@pytest.mark.parametrize("theme", THEMES)
def test_the_edge_of_every_field_stands_out_at_3_to_1_from_inside_and_outside_it(chat, theme):
    """A field is found by its edge alone once its placeholder is gone (WCAG 1.4.11)."""
    chat.emulate_media(color_scheme=theme)
    chat.click("#settings-toggle")

    faint = chat.evaluate("() => {" + CONTRAST + """
        return [...document.querySelectorAll('input, textarea, select')]
          .filter((el) => el.checkVisibility() && el.type !== 'hidden')
          .map((el) => { const edge = getComputedStyle(el).borderTopColor;
                         return [el.id, Math.min(contrast(edge, backgroundOf(el)), contrast(edge, backgroundOf(el.parentElement)))]; })
          .filter(([, ratio]) => ratio < 3)
          .map(([id, ratio]) => `#${id} ${ratio.toFixed(2)}:1`); }""")

    assert faint == []


@pytest.mark.parametrize("theme", THEMES)
def test_a_button_whose_panel_is_open_looks_pressed_its_edge_at_3_to_1(chat, theme):
    """The settings, account and conversations buttons open a panel and say so to a screen
    reader (aria-expanded) only: seen, an open one looked like a closed one (WCAG 1.4.11: the
    state of a control is told at 3:1 too). On a phone's width, where the last two show."""
    chat.emulate_media(color_scheme=theme)
    chat.set_viewport_size({"width": 390, "height": 800})
    edge = "(selector) => {" + CONTRAST + """
        const el = document.querySelector(selector);
        const style = getComputedStyle(el);
        return [style.borderTopColor, style.boxShadow, contrast(style.borderTopColor, backgroundOf(el.parentElement))];
    }"""

    looks = {}
    for selector in ("#settings-toggle", "#account-toggle", "#toggle-sidebar"):
        chat.mouse.move(0, 0)  # a hovered button has an edge of its own
        closed = chat.evaluate(edge, selector)
        chat.click(selector)
        chat.mouse.move(0, 0)
        assert chat.get_attribute(selector, "aria-expanded") == "true"
        opened = chat.evaluate(edge, selector)
        looks[selector] = (opened[:2] != closed[:2], opened[2] >= 3)
        chat.keyboard.press("Escape")  # closed again, before the next (the drawer takes no click)
        if chat.get_attribute(selector, "aria-expanded") == "true":
            chat.click(selector)

    assert looks == {selector: (True, True) for selector in looks}
