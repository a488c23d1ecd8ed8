// The composer's character limit, shown before sending rather than refused after: a counter
// that appears near the limit, and Send disabled beyond it. The limit is the server's
// (GET /api/auth/session's limits.max_message_chars), counted as it counts: in code points.

// Below this share of the limit the counter would only be noise.
const SHOW_FROM = 0.9;

/** What the counter shows for `text` under `max` characters (no limit known: nothing). */
export function limitState(text, max) {
  if (!max) return { count: 0, isShown: false, isOver: false };
  const count = Array.from(text).length;
  return { count, isShown: count >= max * SHOW_FROM, isOver: count > max };
}

export function counterText({ count, isOver }, max) {
  const figures = `${count.toLocaleString("en")} / ${max.toLocaleString("en")}`;
  return isOver ? `${figures}: ${(count - max).toLocaleString("en")} over the limit` : figures;
}

/**
 * @param {object} parts
 * @param {HTMLTextAreaElement} parts.composer
 * @param {HTMLElement} parts.counter
 * @param {HTMLButtonElement} parts.send
 * @param {() => boolean} parts.isBusy Send is disabled for another reason (an answer streams)
 * @param {(text: string) => void} parts.announce tells screen readers when the limit is crossed
 */
export function createCharacterLimit({ composer, counter, send, isBusy, announce }) {
  let max = 0;
  let state = limitState("", 0);

  function update() {
    const wasOver = state.isOver;
    state = limitState(composer.value, max);
    counter.hidden = !state.isShown;
    counter.textContent = state.isShown ? counterText(state, max) : "";
    counter.classList.toggle("over", state.isOver);
    if (state.isOver) composer.setAttribute("aria-invalid", "true");
    else composer.removeAttribute("aria-invalid");
    send.disabled = state.isOver || isBusy();
    if (state.isOver !== wasOver) {
      announce(state.isOver ? `Over the limit of ${max.toLocaleString("en")} characters.` : "Within the limit again.");
    }
  }

  composer.addEventListener("input", update);
  return {
    update,
    isOver: () => state.isOver,
    /** The server's limits; a page that never learns them shows no counter. */
    setLimits(limits) {
      max = Number(limits?.max_message_chars) || 0;
      update();
    },
    get maxMessageChars() {
      return max || null;
    },
  };
}
