import assert from "node:assert/strict";
import { test } from "node:test";

import { ENDING, Generation } from "../generation.js";
import { FIRST_RETRY_MS } from "../reconnect.js";
import { createStallWatch, STALL_HEARTBEATS } from "../stall.js";
import { controlledStream, fakeClock, settle, sse } from "./helpers.mjs";

const START = { message_id: 12, generation_id: 7, request_id: "r", model: "m", heartbeat_s: 15, resume_grace_s: 10 };
const DONE = { generation_id: 7, message_id: 12, finish_reason: "stop", status: "completed" };
const RESUME = { generation_id: 7, message_id: 12, status: "streaming", heartbeat_s: 15 };
const streamResponse = (feed) => new Response(feed.stream, { headers: { "Content-Type": "text/event-stream" } });

/**
 * A page's own answer over hand-fed streams: `feeds[0]` is the answer's, the next ones its
 * resumes; `resumes` lists each resume's offset. A resume fails (the network is down) while
 * `t.down` is true, and stays on its way, neither answered nor failed, while `t.hangs` is.
 * Painting happens at once. `watchesStalls`: the real stall watch, on the test's clock; else
 * none.
 */
function setUp({ startExtra = {}, watchesStalls = false } = {}) {
  const clock = fakeClock();
  const network = new EventTarget();
  const t = { clock, network, feeds: [], resumes: [], states: [], stops: [], recovered: [], down: false };
  t.generation = new Generation({
    paint: (text) => { t.shown = text; },
    createPainter: (paint) => ({ schedule: paint, cancel() {} }),
    watchStall: watchesStalls
      ? (onStall) => createStallWatch(onStall, clock)
      : () => ({ arm() {}, touch() {}, cancel() {} }),
    resume: (id, offset) => async (signal) => {
      t.resumes.push([id, offset]);
      if (t.down) throw new TypeError("Failed to fetch");
      if (t.hangs) {  // on its way until aborted
        await new Promise((_, reject) => signal.addEventListener("abort", () => reject(new DOMException("aborted", "AbortError"))));
      }
      const feed = controlledStream(signal);
      t.feeds.push(feed);
      return streamResponse(feed);
    },
    onReconnecting: (on) => t.states.push(on),
    recover: (id, pieces) => {
      t.recovered.push([id, pieces]);
      return new Promise((resolve) => { t.handBack = resolve; });
    },
    clock,
    network,
  });
  t.outcome = t.generation.run(async (signal) => {
    const feed = controlledStream(signal);
    t.feeds.push(feed);
    return streamResponse(feed);
  });
  t.outcome.then(() => { t.settled = true; });
  t.start = async (deltas) => {
    await settle();
    t.feeds[0].push(sse("start", { ...START, ...startExtra }) + deltas.map((text) => sse("delta", { text })).join(""));
    await settle();
  };
  t.cut = async () => {
    t.feeds.at(-1).error(new TypeError("network error"));
    await settle();
  };
  t.sendStop = (id, seen) => {
    t.stops.push([id, seen]);
    return t.down ? Promise.reject(new TypeError("Failed to fetch")) : Promise.resolve();
  };
  return t;
}

async function advance(t, ms) {
  t.clock.advance(ms);
  await settle();
  await settle();
}

test("a lost connection says Reconnecting, resumes from the last character held, and nothing is doubled at the seam", async () => {
  const t = setUp();
  await t.start(["Hello", ", wörld 👋"]);
  await t.cut();
  assert.deepEqual(t.states, [true], "reconnecting, not an error");
  assert.deepEqual(t.resumes, [], "the first try waits half a second");
  await advance(t, FIRST_RETRY_MS);
  assert.deepEqual(t.resumes, [[7, Array.from("Hello, wörld 👋").length]]);
  t.feeds[1].push(sse("resume", { ...RESUME, offset: 14 }) + sse("delta", { text: " again" }) + sse("done", DONE));
  t.feeds[1].close();
  const outcome = await t.outcome;
  assert.deepEqual(t.states, [true, false]);
  assert.equal(outcome.status, "completed");
  assert.equal(outcome.text, "Hello, wörld 👋 again");
  assert.equal(t.shown, "Hello, wörld 👋 again");
});

/** "Hello, wörld" in two proven deltas, the connection lost, and the resumed stream's `ending`. */
/** "Hello, wörld" sent in two proven pieces, then the connection lost. */
async function lostAfterTwoPieces(t) {
  await t.start([]);
  t.feeds[0].push(sse("delta", { text: "Hello", proof: "p0" }) + sse("delta", { text: ", wörld", proof: "p5" }));
  await settle();
  await t.cut();
}

async function resumedShorter(t, ending) {
  await lostAfterTwoPieces(t);
  await advance(t, FIRST_RETRY_MS);
  t.feeds[1].push(ending);
  t.feeds[1].close();
  await settle();
}

test("an answer whose web process died keeps the text the page holds, and hands back what the record lacks with its proofs", async () => {
  const t = setUp();
  // The reaper ended it with the text saved last: shorter than what this page was sent.
  await resumedShorter(t, sse("prefix", { ...RESUME, text: "Hello, w", earlier_chars: 0 })
    + sse("done", { ...DONE, finish_reason: "error", status: "failed", message_status: "failed" }));
  assert.equal(t.settled, undefined, "ended once the server has what it lacked, before the page reads the record");
  t.handBack();
  const outcome = await t.outcome;
  assert.equal(outcome.status, "failed");
  assert.equal(outcome.text, "Hello, wörld");
  assert.equal(t.shown, "Hello, wörld");
  assert.deepEqual(t.recovered, [[7, [{ offset: 5, text: ", wörld", proof: "p5" }]]]);
});

test("a resumed stream that says the record is short of what the page holds gets the rest at once, before anything ends the answer", async () => {
  const t = setUp();
  // Its relay died between two saves; the reaper has not ended it yet, and the user may Stop.
  await resumedShorter(t, sse("resume", { ...RESUME, offset: 12, stored_chars: 8 }));
  assert.deepEqual(t.recovered, [[7, [{ offset: 5, text: ", wörld", proof: "p5" }]]]);
  assert.equal(t.generation.stop(t.sendStop), 12);
  t.handBack();
  const outcome = await t.outcome;
  assert.equal(outcome.text, "Hello, wörld");
  assert.deepEqual(t.stops, [[7, 12]]);
});

test("a Stop pressed while reconnecting hands back all the page holds: its web process may have died with some of it", async () => {
  const t = setUp();
  await lostAfterTwoPieces(t);
  assert.equal(t.generation.stop(t.sendStop), 12);
  assert.deepEqual(t.recovered, [[7, [{ offset: 0, text: "Hello", proof: "p0" }, { offset: 5, text: ", wörld", proof: "p5" }]]]);
  assert.deepEqual(t.resumes, [], "no more tries to reconnect");
  assert.equal((await t.outcome).text, "Hello, wörld");
});

test("an answer its relay could not store (the database stayed away) hands back what the record lacks, and is not resumed", async () => {
  const t = setUp();
  await t.start([]);
  t.feeds[0].push(sse("delta", { text: "Hello", proof: "p0" }) + sse("delta", { text: ", wörld", proof: "p5", saved: 5 })
    + sse("error", { code: "database_unavailable", message: "the database did not come back" }));
  t.feeds[0].close();
  await settle();
  assert.deepEqual(t.recovered, [[7, [{ offset: 5, text: ", wörld", proof: "p5" }]]], "the first piece is stored");
  t.handBack();
  const outcome = await t.outcome;
  assert.equal(outcome.text, "Hello, wörld");
  assert.deepEqual(t.resumes, []);
});

test("a resumed stream whose record holds all the page was sent hands nothing back", async () => {
  const t = setUp();
  await resumedShorter(t, sse("resume", { ...RESUME, offset: 12, stored_chars: 12 }) + sse("done", DONE));
  assert.equal((await t.outcome).text, "Hello, wörld");
  assert.deepEqual(t.recovered, []);
});

test("a Stop elsewhere that cut the answer short of what this page holds replaces it, and nothing is handed back", async () => {
  const t = setUp();
  await resumedShorter(t, sse("prefix", { ...RESUME, text: "Hel", earlier_chars: 0 })
    + sse("done", { ...DONE, finish_reason: "cancelled", status: "stopped", message_status: "stopped" }));
  const outcome = await t.outcome;
  assert.equal(outcome.text, "Hel");
  assert.equal(t.shown, "Hel");
  assert.deepEqual(t.recovered, []);
});

test("retries wait 0.5 s, doubling, while the server cannot be reached", async () => {
  const t = setUp();
  await t.start(["one"]);
  t.down = true;
  await t.cut();
  const triedAt = [];
  for (let ms = 0; ms <= 4000; ms += 250) {
    const before = t.resumes.length;
    await advance(t, 250);
    if (t.resumes.length > before) triedAt.push(ms + 250);
  }
  assert.deepEqual(triedAt, [500, 1500, 3500]);
});

test("the network coming back tries at once", async () => {
  const t = setUp();
  await t.start(["one"]);
  t.down = true;
  await t.cut();
  await advance(t, FIRST_RETRY_MS);
  assert.equal(t.resumes.length, 1);
  t.down = false;
  t.network.dispatchEvent(new Event("online"));
  await settle();
  await settle();
  assert.equal(t.resumes.length, 2);
});

test("going offline mid-answer reconnects instead of waiting for a stall", async () => {
  const t = setUp();
  await t.start(["one"]);
  t.network.dispatchEvent(new Event("offline"));
  await settle();
  assert.deepEqual(t.states, [true]);
  assert.equal(t.generation.reconnecting, true);
});

test("a connection lost again after a resume resumes again from where it got to", async () => {
  const t = setUp();
  await t.start(["a"]);
  for (const more of ["b", "c"]) {
    await t.cut();
    await advance(t, FIRST_RETRY_MS);
    t.feeds.at(-1).push(sse("resume", { ...RESUME, offset: t.generation.chars }) + sse("delta", { text: more }));
    await settle();
  }
  t.feeds.at(-1).push(sse("done", DONE));
  t.feeds.at(-1).close();
  assert.equal((await t.outcome).text, "abc");
  assert.deepEqual(t.resumes, [[7, 1], [7, 2]]);
});

test("a resumed stream that never sends its first event is ended after two heartbeats and tried again", async () => {
  const t = setUp({ watchesStalls: true });
  await t.start(["one"]);
  await t.cut();
  await advance(t, FIRST_RETRY_MS);
  assert.equal(t.resumes.length, 1, "answered, then silent: not even a ping");
  await advance(t, START.heartbeat_s * 1000 * STALL_HEARTBEATS);
  assert.deepEqual(t.states, [true, false, true], "ended as stalled: reconnecting again");
  await advance(t, FIRST_RETRY_MS);
  assert.deepEqual(t.resumes, [[7, 3], [7, 3]]);
});

test("past the grace period it says so and offers Retry, with the text kept", async () => {
  const t = setUp();
  await t.start(["kept"]);
  t.down = true;
  await t.cut();
  for (let i = 0; i < 30 && !t.settled; i += 1) {
    await advance(t, 1000);
  }
  const outcome = await t.outcome;
  assert.equal(outcome.ending, ENDING.EXPIRED);
  assert.equal(outcome.text, "kept");
  assert.ok(t.clock.now() <= START.resume_grace_s * 1000 + 1000);
  assert.deepEqual(t.states, [true, false]);
});

test("a server without a grace period is not tried again: the answer is interrupted, and all the page holds is handed back", async () => {
  const t = setUp({ startExtra: { resume_grace_s: 0 } });
  await t.start([]);
  t.feeds[0].push(sse("delta", { text: "kept", proof: "p0" }));
  await settle();
  await t.cut();
  const outcome = await t.outcome;
  assert.equal(outcome.ending, ENDING.LOST);
  assert.equal(outcome.text, "kept");
  assert.deepEqual(t.states, []);
  // Its web process may have died with text it had not saved; nothing resumed says how much.
  assert.deepEqual(t.recovered, [[7, [{ offset: 0, text: "kept", proof: "p0" }]]]);
});

test("closing ends the reading at once, sends no Stop and never resumes: the answer goes on elsewhere", async () => {
  const t = setUp();
  await t.start(["one"]);
  t.generation.close();
  const outcome = await t.outcome;
  assert.equal(t.generation.controller.signal.aborted, true);
  await advance(t, 60_000);
  assert.deepEqual(t.resumes, []);
  assert.deepEqual(t.stops, []);
  assert.equal(outcome.text, "one");
});

test("closing while reconnecting ends the waits and tries no more", async () => {
  const t = setUp();
  await t.start(["one"]);
  t.down = true;
  await t.cut();
  t.generation.close();
  await t.outcome;
  await advance(t, 60_000);
  assert.deepEqual(t.resumes, []);
  assert.equal(t.generation.reconnecting, false);
});

test("Stop while reconnecting ends at once with what was seen, and the Stop is kept until the server takes it", async () => {
  const t = setUp();
  await t.start(["seen"]);
  t.down = true;
  await t.cut();
  assert.equal(t.generation.stop(t.sendStop), 4);
  const outcome = await t.outcome;
  assert.equal(outcome.status, "stopped");
  assert.equal(outcome.cancelledBy, "user");
  assert.equal(outcome.text, "seen");
  for (let i = 0; i < 5; i += 1) await advance(t, 2000);
  const tries = t.stops.length;
  assert.ok(tries >= 3, `tried ${tries} times while down`);
  t.down = false;
  t.network.dispatchEvent(new Event("online"));
  await settle();
  await settle();
  assert.equal(t.stops.length, tries + 1, "sent again as soon as the network is back");
  await advance(t, 60_000);
  assert.equal(t.stops.length, tries + 1, "and not after it was taken");
  assert.ok(t.stops.every(([id, seen]) => id === 7 && seen === 4));
  assert.deepEqual(t.resumes.length <= 1, true, "no resume after the Stop");
});

test("a Stop refused because the session ended is sent again until the user signs in again, then not after", async () => {
  const t = setUp();
  await t.start(["seen"]);
  let signedIn = false;
  const tries = [];
  t.generation.stop((id, seen) => {
    tries.push([id, seen]);
    return signedIn ? Promise.resolve() : Promise.reject(Object.assign(new Error("ended"), { status: 401 }));
  });
  assert.equal((await t.outcome).status, "stopped");
  for (let i = 0; i < 3; i += 1) await advance(t, 2000);
  assert.ok(tries.length >= 3, `tried ${tries.length} times while signed out`);
  signedIn = true;
  await advance(t, 8000);
  const taken = tries.length;
  await advance(t, 60_000);
  assert.equal(tries.length, taken, "not sent again once taken");
  assert.ok(tries.every(([id, seen]) => id === 7 && seen === 4));
});

test("a Stop refused for good (the answer had ended) is not sent again", async () => {
  const t = setUp();
  await t.start(["seen"]);
  const tries = [];
  t.generation.stop(() => {
    tries.push(1);
    return Promise.reject(Object.assign(new Error("ended"), { status: 409 }));
  });
  await t.outcome;
  await advance(t, 60_000);
  assert.equal(tries.length, 1);
});

test("a Stop pressed while a resume is on its way ends the answer for good: that resume's end says nothing of it", async () => {
  const t = setUp();
  await t.start(["seen"]);
  t.hangs = true;
  await t.cut();
  await advance(t, FIRST_RETRY_MS);
  assert.equal(t.resumes.length, 1);
  t.generation.stop(t.sendStop);
  assert.equal((await t.outcome).status, "stopped");
  const told = t.states.length;
  await advance(t, 10_000); // the server took the Stop; the stream is closed 5 s on, the resume with it
  assert.deepEqual(t.states.slice(told), [], "nothing says the stopped answer is being written again");
});

test("a page leaving while its stream is lost holds all its pieces at risk; with its stream open, none", async () => {
  const t = setUp();
  await t.start([]);
  t.feeds[0].push(sse("delta", { text: "Hello", proof: "p0" }) + sse("delta", { text: ", wörld", proof: "p5" }));
  await settle();
  assert.deepEqual(t.generation.piecesAtRisk(), [], "a live relay keeps what it sent");
  t.down = true;
  await t.cut();
  assert.deepEqual(t.generation.piecesAtRisk(),
    [{ offset: 0, text: "Hello", proof: "p0" }, { offset: 5, text: ", wörld", proof: "p5" }]);
});

test("pieces of text the relay said is stored are not at risk when the stream is lost", async () => {
  const t = setUp();
  await t.start([]);
  t.feeds[0].push(sse("delta", { text: "Hello", proof: "p0" }) + sse("delta", { text: ", wörld", proof: "p5" })
    + sse("delta", { text: "!", proof: "p12", saved: 5 }));
  await settle();
  t.down = true;
  await t.cut();
  assert.deepEqual(t.generation.piecesAtRisk(),
    [{ offset: 5, text: ", wörld", proof: "p5" }, { offset: 12, text: "!", proof: "p12" }]);
});

test("pieces a resumed stream said the record holds are not at risk when it is lost again", async () => {
  const t = setUp();
  await lostAfterTwoPieces(t);
  await advance(t, FIRST_RETRY_MS);
  t.feeds[1].push(sse("resume", { ...RESUME, offset: 12, stored_chars: 12 }) + sse("delta", { text: "!", proof: "p12" }));
  await settle();
  await t.cut();
  assert.deepEqual(t.generation.piecesAtRisk(), [{ offset: 12, text: "!", proof: "p12" }]);
});

test("a page leaving while a hand-back is on its way holds the pieces it hands back at risk until it is answered", async () => {
  const t = setUp();
  await lostAfterTwoPieces(t);
  await advance(t, FIRST_RETRY_MS);
  t.feeds[1].push(sse("resume", { ...RESUME, offset: 12, stored_chars: 5 }));
  await settle();
  assert.deepEqual(t.generation.piecesAtRisk(), [{ offset: 5, text: ", wörld", proof: "p5" }]);
  t.handBack();
  await settle();
  assert.deepEqual(t.generation.piecesAtRisk(), []);
});
