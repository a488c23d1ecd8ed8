"""The size of the page's text in a real browser follows the size its reader chose in the browser's
settings (WCAG 1.4.4), as Chromium's own default font size (set through the DevTools protocol)."""

import pytest

from tests import factories
from tests.browser.conftest import sign_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

FONT_SIZE_OF = "(selector) => getComputedStyle(document.querySelector(selector)).fontSize"


def choose_default_font_size(page, px: int) -> None:
    """What a reader sets under Settings > Appearance > Font size."""
    page.context.new_cdp_session(page).send("Page.setFontSizes", {"fontSizes": {"standard": px}})


@pytest.mark.parametrize("chosen", [16, 24])
def test_the_text_is_as_large_as_the_reader_chose_in_the_browser(page, stack_with_fake_upstream, user, chosen):
    choose_default_font_size(page, chosen)

    sign_in(page, stack_with_fake_upstream, user)

    sizes = {selector: page.evaluate(FONT_SIZE_OF, selector)
             for selector in ["#composer", "#chat-empty", "#new-conversation", "#conversation-title"]}
    assert sizes == dict.fromkeys(sizes, f"{chosen}px")


def test_with_larger_text_a_window_that_fits_the_side_by_side_layout_no_longer_shows_it(
        page, stack_with_fake_upstream, user):
    """The layout's breakpoint is measured in the reader's text, not in pixels: at 24px text an
    800px window shows the phone's layout (the list in a drawer), and nothing spills sideways."""
    choose_default_font_size(page, 24)
    page.set_viewport_size({"width": 800, "height": 600})

    sign_in(page, stack_with_fake_upstream, user)

    assert page.evaluate("document.documentElement.scrollWidth") <= 800
    assert page.locator("#toggle-sidebar").is_visible()
    page.click("#toggle-sidebar")
    assert page.evaluate("document.activeElement.id") == "conversation-search"
    assert page.evaluate("document.querySelector('main').inert")


def test_on_a_phone_with_larger_text_nothing_spills_sideways(page, stack_with_fake_upstream, user):
    choose_default_font_size(page, 24)
    page.set_viewport_size({"width": 360, "height": 640})

    sign_in(page, stack_with_fake_upstream, user)

    assert page.evaluate("document.documentElement.scrollWidth") <= 360
    page.click("#account-toggle")  # on a phone Sign out is in the account's menu
    assert page.locator("#logout").is_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 360


def test_each_conversations_rename_and_delete_icons_are_as_large_as_the_text(page, stack_with_fake_upstream, user):
    """Before, they stayed 16px at any text size: small targets beside larger text."""
    factories.conversation(owner=user, title="Trip")
    choose_default_font_size(page, 24)

    sign_in(page, stack_with_fake_upstream, user)
    page.wait_for_selector("#conversation-list li .icon svg")

    drawn = page.evaluate("""[...document.querySelectorAll('#conversation-list li .icon')].map(button =>
        [button.querySelector('svg').getBoundingClientRect().width, parseFloat(getComputedStyle(button).fontSize)])""")
    assert len(drawn) == 2 and all(width == text > 16 for width, text in drawn), drawn
