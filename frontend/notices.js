// What the page says outside the conversation: words for screen readers, and the alert.

/**
 * @param {object} parts
 * @param {Element} parts.announcer  a live region, read out and never seen
 * @param {Element} parts.alert  the alert bar, its text in `alertText`, closed by `dismiss`
 * @param {() => void} parts.dismissed  after Dismiss (where the focus goes next)
 */
export function createNotices({ announcer, alert, alertText, dismiss, dismissed }) {
  const clearAlert = () => { alert.hidden = true; };
  dismiss.addEventListener("click", () => { clearAlert(); dismissed(); });
  return {
    announce(text) {
      announcer.textContent = "";
      // A fresh node change, so the same words twice are announced twice.
      requestAnimationFrame(() => { announcer.textContent = text; });
    },
    showAlert(text) {
      alertText.textContent = text;
      alert.hidden = false;
    },
    clearAlert,
  };
}
