// The tab's session storage: what a page keeps for the tab's next load (kept_pieces.js,
// unsent_words.js), gone with the tab.

/** The tab's session storage, or null where the browser blocks it (site data turned off). */
export function tabStorage() {
  try {
    return globalThis.sessionStorage ?? null;
  } catch {
    return null;
  }
}
