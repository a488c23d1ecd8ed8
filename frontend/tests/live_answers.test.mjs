import assert from "node:assert/strict";
import { test } from "node:test";

import { LiveAnswers } from "../live_answers.js";

test("an answer left behind is kept until it ends, and the list hears of both", () => {
  const live = new LiveAnswers();
  const heard = [];
  live.onChange((ids) => heard.push([...ids]));
  const generation = { name: "answer in 3" };
  const entry = live.add(3, generation, "element");

  live.detachAll(); // the user opened another conversation
  assert.equal(live.get(3), entry);
  assert.equal(entry.el, null, "painted nowhere while away");
  assert.equal(entry.generation, generation);

  live.remove(entry);
  assert.equal(live.get(3), null);
  assert.deepEqual(heard, [[3], []]);
});

test("the end of an older answer does not forget a newer one of the same conversation", () => {
  const live = new LiveAnswers();
  const older = live.add(5, "older");
  const newer = live.add(5, "newer");
  live.remove(older);
  assert.equal(live.get(5), newer);
  assert.deepEqual([...live.conversationIds()], [5]);
});

test("answers of several conversations are read at once", () => {
  const live = new LiveAnswers();
  live.add(1, "a", "el-a");
  live.add(2, "b", "el-b");
  assert.deepEqual([...live.conversationIds()].sort(), [1, 2]);
  assert.deepEqual(live.entries().map((e) => e.generation), ["a", "b"]);
  live.detachAll();
  assert.ok(live.entries().every((e) => e.el === null));
});
