// The conversation list's pages, newest first, as the sidebar reads them again: after an answer,
// a new conversation or a first message's title only the first page changes, so only it is read.

/**
 * The conversations shown below the first page once it is read again (`firstPage`, the API's
 * answer), in their order; null when its answer cannot tell (read every page shown again then).
 * A conversation only ever moves to the top of the list (an answer, a rename) or leaves it
 * (deleted), so those shown after the one the first page now ends with are still after it,
 * and one shown before it that the page lacks is gone.
 */
export function shownBelow(shownIds, firstPage) {
  if (firstPage.num_pages <= 1) return []; // the first page is the whole list
  const at = shownIds.indexOf(firstPage.results.at(-1)?.id);
  if (at < 0) return null;
  const onFirst = new Set(firstPage.results.map((c) => c.id));
  return shownIds.slice(at + 1).filter((id) => !onFirst.has(id));
}
