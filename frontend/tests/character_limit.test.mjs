import assert from "node:assert/strict";
import { test } from "node:test";

import { counterText, limitState } from "../character_limit.js";

test("the counter stays hidden well below the limit and appears near it", () => {
  assert.deepEqual(limitState("a".repeat(89), 100), { count: 89, isShown: false, isOver: false });
  assert.deepEqual(limitState("a".repeat(90), 100), { count: 90, isShown: true, isOver: false });
  assert.deepEqual(limitState("a".repeat(100), 100), { count: 100, isShown: true, isOver: false });
});

test("one character beyond the limit is over it", () => {
  assert.deepEqual(limitState("a".repeat(101), 100), { count: 101, isShown: true, isOver: true });
});

test("characters are counted as the server counts them, in code points", () => {
  assert.equal(limitState("😀".repeat(10), 10).isOver, false); // 20 UTF-16 units, 10 code points
  assert.equal(limitState("😀".repeat(11), 10).isOver, true);
});

test("without a known limit there is no counter", () => {
  assert.deepEqual(limitState("a".repeat(100_000), 0), { count: 0, isShown: false, isOver: false });
});

test("the counter shows the count against the limit, and by how much it is over", () => {
  assert.equal(counterText(limitState("a".repeat(7300), 8000), 8000), "7,300 / 8,000");
  assert.equal(counterText(limitState("a".repeat(8120), 8000), 8000), "8,120 / 8,000: 120 over the limit");
});
