import assert from "node:assert/strict";
import { test } from "node:test";

import { ENDING, Generation } from "../generation.js";
import { MESSAGE_STATUSES } from "../vocabulary.js";
import { controlledStream, fakeClock, settle, sse } from "./helpers.mjs";

const START = { message_id: 12, generation_id: 7, request_id: "r", model: "m" };
const DONE = {
  generation_id: 7, message_id: 12, finish_reason: "stop", status: "completed", message_status: "completed",
  usage: { prompt_tokens: 3, completion_tokens: 5 }, ttft_ms: 42.5,
};

/**
 * A Generation over a hand-fed stream, with a painter the test triggers (one call = one frame);
 * `t.stall()` is what the stall watch calls when the stream has been silent too long. Its clock
 * moves only when the test moves it.
 */
function setUp({ baseText = "", clock = fakeClock() } = {}) {
  const painted = [];
  const stops = [];
  const stallWatch = { armed: [], touches: 0, onStall: null };
  let painter;
  let feed;
  const generation = new Generation({
    baseText,
    clock,
    paint: (text) => painted.push(text),
    createPainter: (paint) => {
      painter = { scheduled: 0, cancelled: false, schedule() { this.scheduled += 1; }, cancel() { this.cancelled = true; }, paint };
      return painter;
    },
    watchStall: (onStall) => {
      stallWatch.onStall = onStall;
      return { arm: (s) => stallWatch.armed.push(s), touch: () => { stallWatch.touches += 1; }, cancel() {} };
    },
  });
  const outcome = generation.run(async (signal) => {
    feed = controlledStream(signal);
    return new Response(feed.stream, { headers: { "Content-Type": "text/event-stream" } });
  });
  const sendStop = (id, seen) => { stops.push([id, seen]); return Promise.resolve(); };
  return {
    generation, outcome, painted, stops, sendStop, stallWatch, feed: () => feed, painter: () => painter,
    stall: () => stallWatch.onStall(),
  };
}

test("every delta is in the text the moment it arrives, painted or not", async () => {
  const t = setUp();
  await settle();
  t.feed().push(sse("start", START) + sse("delta", { text: "Hel" }));
  await settle();
  assert.equal(t.generation.text, "Hel");
  t.feed().push(sse("delta", { text: "lo" }) + sse("delta", { text: " 👋" }));
  await settle();
  assert.equal(t.generation.text, "Hello 👋");
  assert.equal(t.painted.length, 0, "nothing painted until a frame comes");
  assert.ok(t.painter().scheduled >= 3);
  t.painter().paint();
  assert.deepEqual(t.painted, ["Hello 👋"]);
  t.feed().push(sse("done", DONE));
  t.feed().close();
  const outcome = await t.outcome;
  assert.equal(outcome.status, "completed");
  assert.equal(outcome.text, "Hello 👋");
  assert.deepEqual(outcome.done, DONE);
  assert.deepEqual(outcome.start, START);
  assert.equal(t.painter().cancelled, true);
});

test("Stop keeps what was painted and reports its code points, not UTF-16 units", async () => {
  const t = setUp();
  await settle();
  t.feed().push(sse("start", START) + sse("delta", { text: "Hello " }) + sse("delta", { text: "wörld 👋" }));
  await settle();
  t.painter().paint(); // the user has now seen "Hello wörld 👋"
  t.feed().push(sse("delta", { text: " and more 🎉" }));
  await settle();
  const seen = t.generation.stop(t.sendStop);
  assert.equal(seen, Array.from("Hello wörld 👋").length);
  assert.notEqual(seen, "Hello wörld 👋".length);
  assert.deepEqual(t.stops, [[7, seen]]);
  const outcome = await t.outcome;
  assert.equal(outcome.status, "stopped");
  assert.equal(outcome.text, "Hello wörld 👋");
  assert.equal(t.generation.stop(t.sendStop), null, "a second Stop does nothing");
  assert.equal(t.stops.length, 1);
});

test("Stop ends the answer at once with what was seen; the stream stays open, unkept, until the server has the Stop", async () => {
  const t = setUp();
  await settle();
  t.feed().push(sse("start", START) + sse("delta", { text: "seen" }));
  await settle();
  t.painter().paint();
  let settled = false;
  t.outcome.then(() => { settled = true; });
  let acknowledge;
  const seen = t.generation.stop(() => new Promise((resolve) => { acknowledge = resolve; })); // a slow network
  await settle();
  assert.equal(settled, true, "the page does not wait for the server to take the Stop");
  const outcome = await t.outcome;
  assert.equal(seen, 4);
  assert.equal(outcome.status, "stopped");
  assert.equal(outcome.text, "seen");
  // Closed before the Stop is recorded, the answer would go on as a departed page's.
  assert.equal(t.generation.controller.signal.aborted, false, "still open while the Stop is on its way");
  t.feed().push(sse("delta", { text: " unseen" }) + sse("done", { ...DONE, status: "stopped", message_status: "stopped" }));
  await settle();
  assert.equal(t.generation.text, "seen");
  acknowledge();
  t.feed().close();
  await t.generation.ended;
  assert.equal(t.generation.done.status, "stopped", "read to its end, unpainted");
});

test("once the server took the Stop, the stopped answer has ended only when its stream has: the server writes it till then", async () => {
  const t = setUp();
  await settle();
  t.feed().push(sse("start", START) + sse("delta", { text: "seen" }));
  await settle();
  t.painter().paint();
  t.generation.stop(t.sendStop); // taken at once
  let ended = false;
  t.generation.ended.then(() => { ended = true; });
  await settle();
  assert.equal(ended, false, "a message sent now would be refused: the conversation is still busy");
  assert.equal(t.generation.controller.signal.aborted, false);
  t.feed().push(sse("done", { ...DONE, status: "stopped", message_status: "stopped" }));
  t.feed().close();
  await settle();
  assert.equal(ended, true);
  assert.equal((await t.outcome).text, "seen");
});

test("once the server took the Stop, a stream that does not end within 5 s is closed", async () => {
  const clock = fakeClock();
  const t = setUp({ clock });
  await settle();
  t.feed().push(sse("start", START) + sse("delta", { text: "seen" }));
  await settle();
  t.generation.stop(t.sendStop);
  await settle();
  clock.advance(4999);
  await settle();
  assert.equal(t.generation.controller.signal.aborted, false);
  clock.advance(1);
  await t.generation.ended;
  assert.equal(t.generation.controller.signal.aborted, true);
});

test("a Stop the server refused closes the stream at once", async () => {
  const t = setUp();
  await settle();
  t.feed().push(sse("start", START));
  await settle();
  t.generation.stop(() => Promise.reject(Object.assign(new Error("ended"), { status: 409 })));
  await t.generation.ended;
  assert.equal(t.generation.controller.signal.aborted, true);
});

test("after Stop, a stream silent for two heartbeats is closed though the Stop is still on its way", async () => {
  const t = setUp();
  await settle();
  t.feed().push(sse("start", { ...START, heartbeat_s: 15 }));
  await settle();
  t.generation.stop(() => new Promise(() => {})); // never answered
  assert.equal((await t.outcome).status, "stopped");
  t.stall();
  assert.equal(t.generation.controller.signal.aborted, true, "no connection is held open for a Stop that may never arrive");
});

test("Stop before anything was painted reports zero", async () => {
  const t = setUp();
  await settle();
  t.feed().push(sse("start", START) + sse("delta", { text: "unseen" }));
  await settle();
  assert.equal(t.generation.stop(t.sendStop), 0);
  assert.deepEqual(t.stops, [[7, 0]]);
  assert.equal((await t.outcome).text, "");
});

test("Continue: the old text stays in front, and only this generation's deltas are counted", async () => {
  const t = setUp({ baseText: "Once upon a tíme" });
  await settle();
  t.feed().push(sse("start", START) + sse("delta", { text: ", 世界" }));
  await settle();
  t.painter().paint();
  assert.deepEqual(t.painted, ["Once upon a tíme, 世界"]);
  assert.equal(t.generation.stop(t.sendStop), 4);
  assert.equal((await t.outcome).text, "Once upon a tíme, 世界");
});

test("Stop before start ends the answer at once, waits for the generation's id, then sends a Stop of zero", async () => {
  const t = setUp();
  await settle();
  assert.equal(t.generation.stop(t.sendStop), 0);
  assert.equal((await t.outcome).status, "stopped", "ended on screen before the server named it");
  await settle();
  assert.deepEqual(t.stops, [], "no id yet: nothing to name in a Stop");
  assert.equal(t.generation.controller.signal.aborted, false, "an abort now would read as a departed client");
  t.feed().push(sse("start", START) + sse("delta", { text: "unseen" }));
  await settle();
  assert.deepEqual(t.stops, [[7, 0]]);
  t.feed().push(sse("done", { ...DONE, status: "stopped", message_status: "stopped" }));
  t.feed().close();
  await t.generation.ended;
  const outcome = await t.outcome;
  assert.equal(outcome.status, "stopped");
  assert.equal(outcome.cancelledBy, "user");
  assert.equal(outcome.text, "");
});

test("Stop before the server answers ends the answer at once; a refusal that comes later is what `ended` says", async () => {
  const stops = [];
  const generation = new Generation({ paint() {}, createPainter: () => ({ schedule() {}, cancel() {} }) });
  let refuse;
  const outcome = await (async () => {
    const run = generation.run(() => new Promise((resolve, reject) => { refuse = reject; }));
    generation.stop((id, seen) => stops.push([id, seen]));
    return run; // a network that holds the request must not keep the answer "Writing…"
  })();
  assert.equal(outcome.status, "stopped");
  assert.equal(outcome.text, "");
  const refusal = Object.assign(new Error("too long"), { status: 400, code: "context_too_long" });
  refuse(refusal);
  const late = await generation.ended;
  assert.equal(late.ending, ENDING.REFUSED, "nothing was stored: the page must say so and give the text back");
  assert.equal(late.error, refusal);
  assert.deepEqual(stops, []);
});

test("a stream that ends without done is an interrupted answer that keeps its text", async () => {
  const t = setUp();
  await settle();
  t.feed().push(sse("start", START) + sse("delta", { text: "partial" }));
  t.feed().close();
  const outcome = await t.outcome;
  assert.equal(outcome.ending, ENDING.LOST);
  assert.equal(outcome.status, "stopped");
  assert.equal(outcome.cancelledBy, "client_gone", "as the server records a connection that closed");
  assert.equal(outcome.text, "partial");
});

test("a stream silent for two heartbeats is ended here as stalled, and keeps its text", async () => {
  const t = setUp();
  await settle();
  t.feed().push(sse("start", { ...START, heartbeat_s: 15 }) + sse("delta", { text: "so far" }));
  await settle();
  t.feed().push(": ping\n\n");
  await settle();
  assert.deepEqual(t.stallWatch.armed, [15]);
  assert.equal(t.stallWatch.touches, 2, "a ping is bytes too");
  t.stall();
  const result = await t.outcome;
  assert.equal(t.generation.controller.signal.aborted, true);
  assert.equal(result.ending, ENDING.STALLED);
  assert.equal(result.status, "stopped");
  assert.equal(result.text, "so far");
});

test("a watched answer starts from the saved text, counts it as seen, and settles on done", async () => {
  const t = setUp();
  await settle();
  t.feed().push(sse("prefix", { generation_id: 7, message_id: 12, status: "streaming", text: "Saved 👋" }));
  await settle();
  assert.equal(t.generation.id, 7);
  t.painter().paint();
  assert.deepEqual(t.painted, ["Saved 👋"]);
  t.feed().push(sse("delta", { text: " more" }));
  await settle();
  t.painter().paint();
  assert.equal(t.generation.stop(t.sendStop), Array.from("Saved 👋 more").length);
  assert.deepEqual(t.stops, [[7, 12]]);
  assert.equal((await t.outcome).text, "Saved 👋 more");
});

test("a watched continued answer shows its earlier text but counts only its own as seen", async () => {
  const t = setUp();
  await settle();
  t.feed().push(sse("prefix", { generation_id: 7, message_id: 12, status: "streaming", text: "Before. Now 👋",
    earlier_chars: Array.from("Before.").length }));
  await settle();
  t.painter().paint();
  assert.deepEqual(t.painted, ["Before. Now 👋"]);
  assert.equal(t.generation.stop(t.sendStop), Array.from(" Now 👋").length);
  assert.equal((await t.outcome).text, "Before. Now 👋");
});

test("a watched answer that had already ended gives its prefix and done at once", async () => {
  const t = setUp();
  await settle();
  t.feed().push(sse("prefix", { generation_id: 7, message_id: 12, status: "completed", text: "All of it" })
    + sse("done", DONE));
  t.feed().close();
  const outcome = await t.outcome;
  assert.equal(outcome.status, "completed");
  assert.equal(outcome.text, "All of it");
});

// An error event, then `done` failed: the outcome has the error, and the message's status as
// `done` says it (a continuation that failed leaves its answer truncated, to be continued again).
for (const { name, baseText, delta, messageStatus, text } of [
  { name: "an error event is reported with the failed done that follows it", baseText: "", delta: "so", messageStatus: "failed", text: "so" },
  { name: "a continuation that failed leaves its answer as the server's done says: truncated, to be continued again", baseText: "Once upon", delta: " a time", messageStatus: "truncated", text: "Once upon a time" },
]) {
  test(name, async () => {
    const t = setUp({ baseText });
    await settle();
    const error = { code: "upstream_disconnected", message: "the model went away" };
    t.feed().push(sse("start", START) + sse("delta", { text: delta }) + sse("error", error)
      + sse("done", { ...DONE, finish_reason: "error", status: "failed", message_status: messageStatus }));
    t.feed().close();
    const outcome = await t.outcome;
    assert.equal(outcome.status, messageStatus);
    assert.deepEqual(outcome.error, error);
    assert.equal(outcome.ending, undefined);
    assert.equal(outcome.text, text);
  });
}

test("Stop after done changes nothing", async () => {
  const t = setUp();
  await settle();
  t.feed().push(sse("start", START) + sse("delta", { text: "all" }) + sse("done", DONE));
  await settle();
  assert.equal(t.generation.stop(t.sendStop), null);
  t.feed().close();
  assert.equal((await t.outcome).status, "completed");
  assert.deepEqual(t.stops, []);
});

test("a refused request is an outcome, not an exception", async () => {
  const refusal = Object.assign(new Error("busy"), { status: 429, code: "too_many_streams" });
  const generation = new Generation({ baseText: "kept", paint() {}, createPainter: () => ({ schedule() {}, cancel() {} }) });
  const outcome = await generation.run(() => Promise.reject(refusal));
  assert.equal(outcome.ending, ENDING.REFUSED);
  assert.equal(outcome.error, refusal);
  assert.equal(outcome.text, "kept");
});

test("every status an outcome can carry is in the shared vocabulary", async () => {
  const t = setUp();
  await settle();
  t.feed().close();
  assert.ok(MESSAGE_STATUSES.includes((await t.outcome).status));
});
