import assert from "node:assert/strict";
import { test } from "node:test";

import { shownBelow } from "../conversation_pages.js";

// Pages of three: the first page's answer, as GET /api/conversations gives it.
const firstPage = (ids, numPages) => ({ results: ids.map((id) => ({ id })), page: 1, num_pages: numPages });

test("an answer in a conversation further down moves it up: the pages below stay, without it", () => {
  const shown = [9, 8, 7, 6, 5, 4, 3, 2, 1];
  assert.deepEqual(shownBelow(shown, firstPage([3, 9, 8], 3)), [7, 6, 5, 4, 2, 1]);
});

test("a new conversation on top pushes the first page's last one below it", () => {
  const shown = [9, 8, 7, 6, 5, 4];
  assert.deepEqual(shownBelow(shown, firstPage([10, 9, 8], 4)), [7, 6, 5, 4]);
});

test("one deleted elsewhere from the first page is shown no more", () => {
  const shown = [9, 8, 7, 6, 5, 4];
  assert.deepEqual(shownBelow(shown, firstPage([9, 7, 6], 2)), [5, 4]);
});

test("nothing changed: the pages below stay as they were", () => {
  const shown = [9, 8, 7, 6, 5, 4];
  assert.deepEqual(shownBelow(shown, firstPage([9, 8, 7], 2)), [6, 5, 4]);
});

test("a first page that is the whole list leaves nothing below it", () => {
  assert.deepEqual(shownBelow([9, 8, 7, 6], firstPage([9, 8], 1)), []);
  assert.deepEqual(shownBelow([9, 8], firstPage([], 1)), []);
});

test("a first page ending where nothing shown is cannot tell what is below it", () => {
  assert.equal(shownBelow([9, 8, 7, 6], firstPage([12, 11, 10], 3)), null); // many new elsewhere
  assert.equal(shownBelow([], firstPage([3, 2, 1], 2)), null); // nothing shown yet
});
