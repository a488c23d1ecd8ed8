import assert from "node:assert/strict";
import { test } from "node:test";

import { createStallWatch, STALL_HEARTBEATS } from "../stall.js";
import { fakeClock } from "./helpers.mjs";

test("a stream silent for two heartbeats has stalled, and is reported once", () => {
  const clock = fakeClock();
  let stalls = 0;
  const watch = createStallWatch(() => { stalls += 1; }, clock);
  watch.arm(15);
  clock.advance(15_000 * STALL_HEARTBEATS - 1);
  assert.equal(stalls, 0);
  clock.advance(1);
  assert.equal(stalls, 1);
  clock.advance(120_000);
  assert.equal(stalls, 1);
  assert.equal(clock.pending(), 0);
});

test("every byte, a ping's too, puts the stall off by two heartbeats from then", () => {
  const clock = fakeClock();
  let stalls = 0;
  const watch = createStallWatch(() => { stalls += 1; }, clock);
  watch.arm(1);
  for (let i = 0; i < 10; i += 1) {
    clock.advance(1_500);
    watch.touch();
  }
  assert.equal(stalls, 0, "a ping every 1.5 s of a 1 s heartbeat is alive");
  clock.advance(1_999);
  assert.equal(stalls, 0);
  clock.advance(1);
  assert.equal(stalls, 1);
});

test("a flood of bytes costs no timer each", () => {
  const clock = fakeClock();
  const watch = createStallWatch(() => {}, clock);
  watch.arm(15);
  for (let i = 0; i < 1000; i += 1) watch.touch();
  assert.equal(clock.pending(), 1);
});

test("without a heartbeat nothing is watched, and a cancelled watch never fires", () => {
  const clock = fakeClock();
  let stalls = 0;
  const unarmed = createStallWatch(() => { stalls += 1; }, clock);
  unarmed.arm(undefined);
  clock.advance(3_600_000);
  const cancelled = createStallWatch(() => { stalls += 1; }, clock);
  cancelled.arm(1);
  cancelled.cancel();
  clock.advance(3_600_000);
  assert.equal(stalls, 0);
  assert.equal(clock.pending(), 0);
});

test("the default clock calls the timers as a browser demands, not as another object's methods", async () => {
  const { setTimeout: realSet, clearTimeout: realClear } = globalThis;
  // A browser's window.setTimeout throws "Illegal invocation" when `this` is another object.
  function strict(real) {
    return function (...args) {
      if (this !== undefined && this !== globalThis) throw new TypeError("Illegal invocation");
      return real(...args);
    };
  }
  globalThis.setTimeout = strict(realSet);
  globalThis.clearTimeout = strict(realClear);
  try {
    let stalls = 0;
    const watch = createStallWatch(() => { stalls += 1; });
    watch.arm(0.001);
    await new Promise((resolve) => realSet(resolve, 20));
    assert.equal(stalls, 1);
    createStallWatch(() => {}).cancel();
  } finally {
    globalThis.setTimeout = realSet;
    globalThis.clearTimeout = realClear;
  }
});
