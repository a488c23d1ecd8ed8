"""Debian's Chromium, and scripts put into the page to measure what the user would see."""

import json
import os

from harness.waiting import wait_until

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
# Run as root in CI; without the networking flags Chromium keeps trying to reach the internet.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

# Counts animation frames and records, once per frame, how long the streaming answer is, and
# how many paints the app made; catches any script that model output might run.
FRAME_PROBE = """
window.__frames = 0;
window.__growth = [];
window.__longestTask = 0;
const tick = () => {
  window.__frames += 1;
  const streaming = document.querySelector('.message[data-role="assistant"][data-status="streaming"] .message-content');
  if (streaming) window.__growth.push(streaming.textContent.length);
  requestAnimationFrame(tick);
};
requestAnimationFrame(tick);
try {
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) window.__longestTask = Math.max(window.__longestTask, entry.duration);
  }).observe({ type: "longtask", buffered: true });
} catch (error) {}
"""


def wait_for_true(page, expression: str, timeout_ms: int = 30_000) -> None:
    """Polls `expression` with page.evaluate until it is true. Not page.wait_for_function: that
    evaluates the string inside the page, which the app's CSP (no 'unsafe-eval') refuses."""
    wait_until(lambda: page.evaluate(expression), timeout_ms / 1000, expression)


def wait_for_handled(page, condition, what: str, timeout_s: float = 10) -> None:
    """Waits until `condition` holds of what the page's event handlers collect (requests held by
    a route, requests sent). Playwright's sync API runs those handlers only while the test calls
    into it, so each look first asks the page something: a bare poll could wait out its deadline
    on a request that had long been made."""
    wait_until(lambda: page.evaluate("true") and condition(), timeout_s, what)


# What the page shows of its state, for a report on a failed test.
PAGE_STATE = """
({
  address: location.hash,
  alert: document.querySelector("#alert:not([hidden]) #alert-text")?.textContent ?? null,
  streaming: document.body.dataset.streaming ?? null,
  messages: [...document.querySelectorAll("#messages .message")].map((m) => ({
    role: m.dataset.role, status: m.dataset.status, error: m.dataset.error ?? null,
    state: m.querySelector(".message-state")?.textContent || null,
    text: (m.querySelector(".message-content")?.textContent ?? "").slice(0, 120),
  })),
})
"""


def page_state(page) -> str:
    """The page as a failing test left it: its address, alert, messages and console errors."""
    try:
        state = page.evaluate(PAGE_STATE)
    except Exception as error:  # a page closed or crashed says so instead
        state = f"not readable: {error}"
    errors = getattr(page, "console_errors", [])
    return json.dumps({"page": state, "console_errors": errors}, indent=1, ensure_ascii=False)


def alert_text(page) -> str:
    """The alert's words, once it shows."""
    page.wait_for_selector("#alert:not([hidden])")
    return page.locator("#alert-text").inner_text()


def last_answer(page):
    return page.locator('#messages .message[data-role="assistant"]').last


def send(page, text: str) -> None:
    page.evaluate("window.chatappStats.paints = 0; window.__frames = 0; window.__growth = [];")
    page.fill("#composer", text)
    page.press("#composer", "Enter")


def wait_for_end(page, timeout_ms: int = 120_000) -> None:
    page.wait_for_selector('#messages .message[data-role="assistant"]:not([data-status="streaming"])',
                           timeout=timeout_ms)
    wait_for_true(page, "document.body.dataset.streaming === 'false'", timeout_ms)


def wait_for_streaming_text(page, text: str, timeout_ms: int = 30_000) -> None:
    """Waits until the answer being written shows `text` (so that it has started: a Stop now is
    sent at once, not when the server names the answer)."""
    answer = "#messages .message[data-status=\"streaming\"] .message-content"
    shown = f"document.querySelector('{answer}')?.textContent"
    wait_for_true(page, f"{shown} === {json.dumps(text)}", timeout_ms)
