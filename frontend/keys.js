// The page's keys. An input method's (Japanese, Chinese, Korean…) while it composes are its own:
// its Enter picks a candidate and its Escape drops one, so neither is a command of the page.

/**
 * True for a keydown that is part of a composition. keyCode 229 marks the keydown that ends one
 * where the browser reports it after `compositionend`, with isComposing already false (Safari).
 */
export const isComposing = (event) => event.isComposing || event.keyCode === 229;

/**
 * Escape anywhere on the page: `stop()` while `canStop()`, but from a field with an Escape of its
 * own (search clears, a list closes) other than the composer; else `otherwise()`.
 */
export function onEscape({ composer, canStop, stop, otherwise }) {
  const hasOwnEscape = (el) => el instanceof Element && el.matches("input, textarea, select")
    && el !== composer;
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape" || event.defaultPrevented || isComposing(event)) return;
    if (canStop() && !hasOwnEscape(event.target)) {
      event.preventDefault();
      stop();
    } else {
      otherwise();
    }
  });
}
