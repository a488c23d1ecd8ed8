import assert from "node:assert/strict";
import { test } from "node:test";

import { hasText } from "../message_text.js";

test("spaces, control and invisible characters alone are no text, as the server counts it", () => {
  for (const blank of ["", " \n\t", "\u200b", "\ufeff", "\x1c\x1f", "\u00a0\u3000", "\u2060\u200d"]) {
    assert.equal(hasText(blank), false, JSON.stringify(blank));
  }
});

test("anything a reader sees is text, invisible characters beside it or not", () => {
  for (const text of ["a", "é", "👍", "\u200bx", " 1 ", "👨‍👩‍👧", "שלום"]) {
    assert.equal(hasText(text), true, JSON.stringify(text));
  }
});
