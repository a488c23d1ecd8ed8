// The open conversation in the address, as #/c/<id>, so Back, Forward, a bookmark and an
// edited address all move between conversations.

export const ROUTE = Object.freeze({
  NEW: "new", // no conversation in the address: a new one
  CONVERSATION: "conversation",
  UNKNOWN: "unknown", // looks like a conversation's address but names none
  OTHER: "other", // an in-page anchor such as the skip link's #composer: not ours
});

// 15 digits stay exact in a JS number; anything longer names no conversation we could have.
const CONVERSATION_HASH = /^#\/?c\/(\d{1,15})$/;
const ROUTE_LIKE = /^#\/?c(?:\/|$)/;

/** What the address's hash asks for; `#c/<id>` is read as well as `#/c/<id>`. */
export function routeOf(hash) {
  if (hash === "" || hash === "#" || hash === "#/") return { kind: ROUTE.NEW };
  const match = CONVERSATION_HASH.exec(hash);
  if (match && Number(match[1]) > 0) return { kind: ROUTE.CONVERSATION, id: Number(match[1]) };
  if (ROUTE_LIKE.test(hash)) return { kind: ROUTE.UNKNOWN };
  return { kind: ROUTE.OTHER };
}

export const hashOf = (id) => (id === null ? "" : `#/c/${id}`);

/**
 * Puts conversation `id` (or none) into the address. Moving to another conversation is a step
 * in the history, so Back returns to the one before; `replace` corrects the current step
 * instead (the conversation is gone, or was never there).
 */
export function showInAddress(id, { replace = false } = {}, env = globalThis) {
  const { location, history } = env;
  const shown = routeOf(location.hash);
  if (id === null ? shown.kind === ROUTE.NEW : shown.id === id) return; // #c/5 is #/c/5 too
  const url = hashOf(id) || location.pathname + location.search;
  if (replace) history.replaceState(null, "", url);
  else history.pushState(null, "", url);
}
