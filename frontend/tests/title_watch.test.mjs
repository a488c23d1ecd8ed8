import assert from "node:assert/strict";
import { test } from "node:test";

import { TITLE_CHECKS_MS, watchTitle } from "../title_watch.js";

// The waits are recorded, not slept: the test sees the backoff without taking its time.
function watcher(titles, { shownTitle = "Soup recipes" } = {}) {
  const waits = [];
  const shownAs = [];
  const watching = watchTitle({
    read: async () => {
      const next = titles.shift();
      if (next instanceof Error) throw next;
      return { id: 3, title: next };
    },
    shown: () => shownTitle,
    show: (conversation) => shownAs.push(conversation.title),
    wait: async (ms) => waits.push(ms),
  });
  return { watching, waits, shownAs };
}

test("the model's title is shown as soon as a read finds it, and reading stops there", async () => {
  const { watching, waits, shownAs } = watcher(["Soup recipes", "Quick soup recipes", "never read"]);
  assert.equal(await watching, true);
  assert.deepEqual(shownAs, ["Quick soup recipes"]);
  assert.deepEqual(waits, [1000, 2000]);
});

test("a title that never changes is read once after each wait, each twice the last, then left", async () => {
  const { watching, waits, shownAs } = watcher(TITLE_CHECKS_MS.map(() => "Soup recipes"));
  assert.equal(await watching, false);
  assert.deepEqual(shownAs, []);
  assert.deepEqual(waits, [1000, 2000, 4000, 8000]);
});

test("a conversation that can no longer be read ends the watch quietly", async () => {
  const { watching, waits, shownAs } = watcher([new Error("404")]);
  assert.equal(await watching, false);
  assert.deepEqual(shownAs, []);
  assert.deepEqual(waits, [1000]);
});
