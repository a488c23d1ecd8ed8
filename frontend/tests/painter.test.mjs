import assert from "node:assert/strict";
import { test } from "node:test";

import { createFramePainter } from "../render.js";
import { fakeFrames } from "./helpers.mjs";

function setUp() {
  const env = fakeFrames();
  let paints = 0;
  const painter = createFramePainter(() => { paints += 1; }, env);
  return { env, painter, paints: () => paints };
}

test("many updates within a frame paint once", () => {
  const { env, painter, paints } = setUp();
  for (let i = 0; i < 50; i += 1) painter.schedule();
  assert.equal(env.pending(), 1);
  env.frame();
  assert.equal(paints(), 1);
  env.frame();
  assert.equal(paints(), 1, "no update, no paint");
  painter.schedule();
  env.frame();
  assert.equal(paints(), 2);
});

test("nothing is painted while the page is hidden, and one paint catches up", () => {
  const { env, painter, paints } = setUp();
  env.setHidden(true);
  painter.schedule();
  painter.schedule();
  assert.equal(env.pending(), 0, "no frame requested while hidden");
  env.frame();
  assert.equal(paints(), 0);
  env.setHidden(false);
  env.frame();
  assert.equal(paints(), 1);
});

test("hidden between the request and the frame: that frame paints nothing", () => {
  const { env, painter, paints } = setUp();
  painter.schedule();
  env.document.hidden = true; // no event yet, as when the frame fires first
  env.frame();
  assert.equal(paints(), 0);
  env.setHidden(false);
  env.frame();
  assert.equal(paints(), 1);
});

test("cancel drops the pending frame and stops listening", () => {
  const { env, painter, paints } = setUp();
  assert.equal(env.listeners(), 1);
  painter.schedule();
  painter.cancel();
  env.frame();
  painter.schedule();
  env.frame();
  assert.equal(paints(), 0);
  assert.equal(env.listeners(), 0);
});
