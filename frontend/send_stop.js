// Send or Stop: while an answer of the conversation on screen is written, Stop shows and Send
// is off; keyboard focus follows the control that went away, never taken from elsewhere.

/**
 * @param {object} parts
 * @param {HTMLButtonElement} parts.send
 * @param {HTMLButtonElement} parts.stop
 * @param {() => HTMLElement} parts.readingPlace  where the focus goes once the answer has ended
 * @param {() => boolean} parts.isOverLimit  the composer holds more than may be sent
 * @param {(on: boolean) => void} parts.refreshActions  the messages' own buttons
 * @returns {(on: boolean) => void}
 */
export function createSendStop({ send, stop, readingPlace, isOverLimit, refreshActions }) {
  return function setStreaming(on) {
    const focused = document.activeElement;
    document.body.dataset.streaming = on ? "true" : "false";
    send.disabled = on || isOverLimit();
    stop.hidden = !on;
    refreshActions(on);
    // Gone, or hidden with the rest of its message's controls (Continue, pressed from the keyboard).
    const lost = !focused || focused === document.body || !focused.isConnected
      || focused.closest("[hidden]") !== null;
    // Do not strand keyboard focus on a control that just went away; never steal it otherwise.
    if (on && (lost || focused === send)) stop.focus();
    if (!on && (lost || focused === stop || focused.disabled)) readingPlace().focus();
  };
}
