// The conversation list's first page read again, and those shown below it: after an answer, a
// new conversation or a first message's title only the first page changes, so only it is read.

/**
 * The ids of the conversations shown (`shown`: each `{id, updated_at}` as last read, in their
 * order) that stay below the first page read again (`firstPage`, the API's answer); none when
 * the first page takes the list's place, and Show older goes on after its last.
 * A conversation only ever moves to the top of the list (an answer, a rename) or leaves it
 * (deleted). So when the first page ends with one shown, still where it was shown (its
 * updated_at unchanged), those shown after it are still after it, and one shown before it that
 * the page lacks is gone. Ending elsewhere, the page cannot tell where those shown below it
 * stand now: the list folds back to the first page, and Show older reads on from there.
 */
export function shownBelow(shown, firstPage) {
  const last = firstPage.results.at(-1);
  const at = shown.findIndex((c) => c.id === last?.id);
  if (firstPage.next === null || at < 0 || shown[at].updated_at !== last.updated_at) return [];
  const onFirst = new Set(firstPage.results.map((c) => c.id));
  return shown.slice(at + 1).map((c) => c.id).filter((id) => !onFirst.has(id));
}
