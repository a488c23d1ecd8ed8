import assert from "node:assert/strict";
import { test } from "node:test";

import { cutBetweenGlyphs } from "../title_limit.js";

const FAMILY = "\u{1F468}\u200D\u{1F469}\u200D\u{1F467}"; // one glyph, five code points

test("a title within the limit in code points is whole, though twice as long in UTF-16 units", () => {
  assert.equal(cutBetweenGlyphs("😀".repeat(150), 200), "😀".repeat(150));
});

test("a title past the limit keeps the most code points it can", () => {
  assert.equal(cutBetweenGlyphs("😀".repeat(201), 200), "😀".repeat(200));
});

test("a glyph across the limit goes whole, as the server cuts", () => {
  assert.equal(cutBetweenGlyphs(`${"a".repeat(197)}${FAMILY}`, 200), "a".repeat(197));
  assert.equal(cutBetweenGlyphs(`${"a".repeat(195)}${FAMILY}b`, 200), `${"a".repeat(195)}${FAMILY}`);
  assert.equal(cutBetweenGlyphs("e\u0301".repeat(3), 5), "e\u0301".repeat(2)); // no letter without its accent
});

test("no room keeps nothing", () => {
  assert.equal(cutBetweenGlyphs("abc", 0), "");
});
