import assert from "node:assert/strict";
import { test } from "node:test";

import { payloadOf, readEvents } from "../stream.js";
import { encoder, splitAt, streamOf } from "./helpers.mjs";

// A recorded answer as our server sends it, plus what proxies and other servers may do to it:
// CRLF line ends, a comment, a nameless event, multi-line data, multi-byte characters in every
// UTF-8 width, and no newline at all after the last event.
const RECORDED = [
  ": connected\r\n\r\n",
  "event: start\r\n",
  'data: {"message_id": 12, "generation_id": 7, "request_id": "0f1e", "model": "SmolLM2-135M-Instruct"}\r\n',
  "\r\n",
  'event: delta\ndata: {"text": "Hel"}\n\n',
  'event: delta\ndata: {"text": "lo, 世界 👋🏽"}\n\n',
  ": ping\n\n",
  'event: delta\ndata: {"text": "é and 🇫🇷\\n"}\n\n',
  "event: note\ndata: line one\ndata:line two\n\n",
  "data: nameless\n\n",
  "event: done\n",
  'data: {"generation_id": 7, "message_id": 12, "finish_reason": "stop", "status": "completed", "usage": {"prompt_tokens": 31, "completion_tokens": 12}, "ttft_ms": 182.4}',
].join("");

const EXPECTED = [
  ["start", { message_id: 12, generation_id: 7, request_id: "0f1e", model: "SmolLM2-135M-Instruct" }],
  ["delta", { text: "Hel" }],
  ["delta", { text: "lo, 世界 👋🏽" }],
  ["delta", { text: "é and 🇫🇷\n" }],
  ["note", "line one\nline two"],
  ["message", "nameless"],
  ["done", {
    generation_id: 7, message_id: 12, finish_reason: "stop", status: "completed",
    usage: { prompt_tokens: 31, completion_tokens: 12 }, ttft_ms: 182.4,
  }],
];

const BYTES = encoder.encode(RECORDED);

async function collect(source) {
  const events = [];
  for await (const event of readEvents(source)) {
    events.push([event.event, event.data.startsWith("{") ? payloadOf(event) : event.data]);
  }
  return events;
}

test("the recorded stream in one read gives every event, in order", async () => {
  assert.deepEqual(await collect(streamOf([BYTES])), EXPECTED);
});

test("a Response is read the same as its body", async () => {
  assert.deepEqual(await collect(new Response(streamOf([BYTES]))), EXPECTED);
});

test("the recording has characters of 2, 3 and 4 bytes to split", () => {
  const widths = new Set(Array.from(RECORDED, (ch) => encoder.encode(ch).length));
  assert.deepEqual([...widths].sort(), [1, 2, 3, 4]);
});

test("split into two reads at every byte offset, the same events come out", async () => {
  for (let offset = 1; offset < BYTES.length; offset += 1) {
    assert.deepEqual(await collect(streamOf(splitAt(BYTES, [offset]))), EXPECTED, `split at byte ${offset}`);
  }
});

test("one byte per read gives the same events", async () => {
  const offsets = Array.from({ length: BYTES.length - 1 }, (_, i) => i + 1);
  assert.deepEqual(await collect(streamOf(splitAt(BYTES, offsets))), EXPECTED);
});

test("random splits into several reads give the same events", async () => {
  let seed = 12345;
  const random = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
  for (let round = 0; round < 300; round += 1) {
    const offsets = new Set();
    const count = 1 + Math.floor(random() * 12);
    while (offsets.size < count) offsets.add(1 + Math.floor(random() * (BYTES.length - 1)));
    const sorted = [...offsets].sort((a, b) => a - b);
    assert.deepEqual(await collect(streamOf(splitAt(BYTES, sorted))), EXPECTED, `splits at ${sorted}`);
  }
});

test("an event is yielded as soon as its blank line arrives, before the stream ends", async () => {
  let controller;
  const stream = new ReadableStream({ start(c) { controller = c; } });
  const events = readEvents(stream);
  controller.enqueue(encoder.encode('event: delta\ndata: {"text": "a"}\n\nevent: delta\ndata: {"te'));
  const first = await events.next();
  assert.deepEqual(first.value, { event: "delta", data: '{"text": "a"}', id: undefined });
  controller.enqueue(encoder.encode('xt": "b"}\n\n'));
  assert.equal((await events.next()).value.data, '{"text": "b"}');
  controller.close();
  assert.equal((await events.next()).done, true);
});

test("the last event counts without its blank line or even its newline", async () => {
  for (const ending of ["", "\n", "\r\n", "\r"]) {
    const events = await collect(streamOf([`event: done\ndata: {"status": "stopped"}${ending}`]));
    assert.deepEqual(events, [["done", { status: "stopped" }]], JSON.stringify(ending));
  }
});

test("lines ended by a lone CR are lines", async () => {
  const events = await collect(streamOf(['event: delta\rdata: {"text": "x"}\r\revent: delta\rdata: {"text": "y"}\r\r']));
  assert.deepEqual(events, [["delta", { text: "x" }], ["delta", { text: "y" }]]);
});

test("a stream cut inside an event leaves data that is not JSON, not a made-up event", async () => {
  const events = [];
  for await (const event of readEvents(streamOf(['event: delta\ndata: {"text": "ab']))) events.push(event);
  assert.equal(events.length, 1);
  assert.equal(payloadOf(events[0]), undefined);
});

test("a stream of only comments and nothing else yields nothing", async () => {
  assert.deepEqual(await collect(streamOf([": ping\n\n: ping\n\n"])), []);
  assert.deepEqual(await collect(streamOf([])), []);
});

test("leaving the loop early cancels the body", async () => {
  let cancelled = false;
  const stream = new ReadableStream({
    pull(controller) { controller.enqueue(encoder.encode('event: delta\ndata: {"text": "x"}\n\n')); },
    cancel() { cancelled = true; },
  });
  for await (const event of readEvents(stream)) {
    assert.equal(event.event, "delta");
    break;
  }
  assert.equal(cancelled, true);
});

test("a failing read (an abort) reaches the caller", async () => {
  let controller;
  const stream = new ReadableStream({ start(c) { controller = c; } });
  const events = readEvents(stream);
  controller.enqueue(encoder.encode('event: delta\ndata: {"text": "x"}\n\n'));
  await events.next();
  controller.error(new DOMException("aborted", "AbortError"));
  await assert.rejects(events.next(), { name: "AbortError" });
});
