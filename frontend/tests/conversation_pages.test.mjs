import assert from "node:assert/strict";
import { test } from "node:test";

import { shownBelow } from "../conversation_pages.js";

// Pages of three. A conversation as the list holds it: its id and its updated_at, which an
// answer or a rename changes (`id` and `"moved"`); the first page's answer as GET
// /api/conversations gives it, `next` null when it is the whole list.
const at = (id, stamp = "read") => ({ id, updated_at: `${stamp} ${id}` });
const shownAsRead = (ids) => ids.map((id) => at(id));
const firstPage = (conversations, isWhole = false) => ({ results: conversations, next: isWhole ? null : "cursor" });

test("an answer in a conversation further down moves it up: the pages below stay, without it", () => {
  const shown = shownAsRead([9, 8, 7, 6, 5, 4, 3, 2, 1]);
  assert.deepEqual(shownBelow(shown, firstPage([at(3, "moved"), at(9), at(8)])), [7, 6, 5, 4, 2, 1]);
});

test("a new conversation on top pushes the first page's last one below it", () => {
  const shown = shownAsRead([9, 8, 7, 6, 5, 4]);
  assert.deepEqual(shownBelow(shown, firstPage([at(10), at(9), at(8)])), [7, 6, 5, 4]);
});

test("one deleted elsewhere from the first page is shown no more", () => {
  const shown = shownAsRead([9, 8, 7, 6, 5, 4]);
  assert.deepEqual(shownBelow(shown, firstPage([at(9), at(7), at(6)])), [5, 4]);
});

test("nothing changed: the pages below stay as they were", () => {
  const shown = shownAsRead([9, 8, 7, 6, 5, 4]);
  assert.deepEqual(shownBelow(shown, firstPage([at(9), at(8), at(7)])), [6, 5, 4]);
});

test("a first page that is the whole list leaves nothing below it", () => {
  assert.deepEqual(shownBelow(shownAsRead([9, 8, 7, 6]), firstPage([at(9), at(8)], true)), []);
  assert.deepEqual(shownBelow(shownAsRead([9, 8]), firstPage([], true)), []);
});

test("a first page ending where nothing shown is takes the list's place: Show older goes on after it", () => {
  assert.deepEqual(shownBelow(shownAsRead([9, 8, 7, 6]), firstPage([at(12), at(11), at(10)])), []); // many new
  assert.deepEqual(shownBelow(shownAsRead([9, 8, 7]), firstPage([at(9), at(7), at(6)])), []); // 8 deleted: 6 moved up
  assert.deepEqual(shownBelow([], firstPage([at(3), at(2), at(1)])), []); // nothing shown yet
});

test("a first page ending with one that moved up since it was shown takes the list's place too", () => {
  // 8 answered, then two new: 9, shown above 8, is below it now, and not gone.
  const shown = shownAsRead([9, 8, 7, 6, 5, 4]);
  assert.deepEqual(shownBelow(shown, firstPage([at(11), at(10), at(8, "moved")])), []);
});
