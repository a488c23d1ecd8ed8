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

test("an answer stopped in a conversation is waited for until its stream ends, and no longer", async () => {
  const live = new LiveAnswers();
  let end;
  const stopped = { stopped: true, ended: new Promise((resolve) => { end = resolve; }) };
  live.remove(live.add(4, stopped));
  let waited = false;
  const waiting = live.stopEnded(4).then(() => { waited = true; });

  await Promise.resolve();
  assert.equal(waited, false, "its stream is still open: the server still writes it");
  end();
  await waiting;
  assert.equal(waited, true);
  await live.stopEnded(4); // ended: nothing to wait for
  await live.stopEnded(9); // never stopped here
  const silent = { stopped: true, ended: new Promise(() => {}) };
  live.remove(live.add(6, silent));
  await live.stopEnded(6, 10); // a stream that never ends holds a new answer back no longer than asked
});

test("signing out stops the page's own answers, closes those it watches, and waits for each Stop's first try", async () => {
  const live = new LiveAnswers();
  const calls = [];
  const own = { stop: (send) => { calls.push("stop"); send(7, 12); return 12; } };
  const watched = { close: () => calls.push("close") };
  const ended = { stop: () => null }; // nothing left to stop
  live.add(1, own);
  live.add(2, watched).watching = true;
  live.add(3, ended);
  let answer;
  const sent = [];
  const sendStop = (...stop) => { sent.push(stop); return new Promise((resolve) => { answer = resolve; }); };
  let left = false;
  const leaving = live.leaveAll(sendStop).then(() => { left = true; });

  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(calls, ["stop", "close"]);
  assert.deepEqual(sent, [[7, 12]]);
  assert.equal(left, false, "the Stop is still on its way: the session must outlive it");
  answer();
  await leaving;
  await live.leaveAll(() => new Promise(() => {}), 10); // a Stop never answered holds it no longer than asked
});
