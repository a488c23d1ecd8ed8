// The composer: a text box that grows with its text, Enter sends (Shift+Enter: a new line), and
// the character limit under it.
import { createCharacterLimit } from "./character_limit.js";
import { isComposing } from "./keys.js";

/**
 * @param {object} parts
 * @param {HTMLTextAreaElement} parts.composer
 * @param {HTMLFormElement} parts.form
 * @param {HTMLElement} parts.counter
 * @param {HTMLButtonElement} parts.send
 * @param {() => boolean} parts.isBusy Send is disabled for another reason (an answer streams)
 * @param {(text: string) => void} parts.announce
 * @param {() => void} parts.submit sends what the composer holds
 */
export function createComposer({ composer, form, counter, send, isBusy, announce, submit }) {
  const limit = createCharacterLimit({ composer, counter, send, announce, isBusy });
  function resize() {
    composer.style.height = "auto";
    composer.style.height = `${composer.scrollHeight}px`;
  }
  composer.addEventListener("input", resize);
  composer.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !isComposing(event)) {
      event.preventDefault();
      submit();
    }
  });
  form.addEventListener("submit", (event) => { event.preventDefault(); submit(); });

  return {
    limit,
    /** Set by the page, not typed: input does not fire. */
    setText(text) {
      composer.value = text;
      resize();
      limit.update();
    },
  };
}
