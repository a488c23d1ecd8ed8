// The open conversation's history as read from the server, a page at a time (docs/api.md): the
// newest page when it opens and again after each answer, older pages as the reader scrolls up.
// A history is `{messages, hasOlder}`: the messages read, oldest first, and whether the server
// holds more before them.

export const NO_HISTORY = Object.freeze({ messages: [], hasOlder: false });

/** The history one page of the API's answer holds. */
export const historyOf = (page) => ({ messages: page.results, hasOlder: page.has_older });

/** Where the page before `history` ends: its first message's id; null when nothing is older. */
export const cursorOf = (history) => (history.hasOlder && history.messages.length ? history.messages[0].id : null);

/** `history` with the page read before it in front (a message read twice is kept once). */
export function withOlder(history, page) {
  const read = new Set(history.messages.map((m) => m.id));
  return { messages: [...page.results.filter((m) => !read.has(m.id)), ...history.messages], hasOlder: page.has_older };
}

/**
 * `history` with its newest page read again: what it holds before the page's first message
 * stays, the rest is the page's (a message is only ever added at the end, or edited with every
 * later one dropped, so what comes before a message that still exists is unchanged). Where the
 * page does not start inside `history` (more came meanwhile than a page holds, or an edit
 * elsewhere dropped its start) the page alone is the history: a gap is never shown.
 */
export function withNewest(history, page) {
  const start = page.has_older && page.results.length
    ? history.messages.findIndex((m) => m.id === page.results[0].id) : -1;
  if (start < 0) return historyOf(page);
  return { messages: [...history.messages.slice(0, start), ...page.results], hasOlder: history.hasOlder };
}
