import assert from "node:assert/strict";
import { test } from "node:test";

import { ApiError } from "../api.js";
import { createKeptPieces, KEEPALIVE_MAX_BYTES } from "../kept_pieces.js";
import { settle } from "./helpers.mjs";

const PIECES = [{ offset: 0, text: "Hello", proof: "p0" }, { offset: 5, text: ", wörld", proof: "p5" }];

/** A tab's session storage, kept across its loads, and the requests that went out. */
function tab() {
  const items = new Map();
  const t = { sent: [], answer: () => Promise.resolve({}) };
  t.storage = {
    getItem: (key) => items.get(key) ?? null,
    setItem: (key, value) => items.set(key, String(value)),
    removeItem: (key) => items.delete(key),
  };
  t.load = () => createKeptPieces({
    storage: t.storage,
    recover: (id, pieces, options = {}) => {
      t.sent.push({ id, pieces, keepalive: options.keepalive === true });
      return t.answer(id);
    },
  });
  return t;
}

test("a page leaving hands back each answer's pieces at risk in a request that outlives it, and keeps them for its next load", async () => {
  const t = tab();
  t.load().leave([{ id: 7, pieces: PIECES }, { id: 8, pieces: [] }]);
  assert.deepEqual(t.sent, [{ id: 7, pieces: PIECES, keepalive: true }]);

  t.sent = [];
  await t.load().handBack();
  assert.deepEqual(t.sent, [{ id: 7, pieces: PIECES, keepalive: false }], "handed back again on the next load");
  t.sent = [];
  await t.load().handBack();
  assert.deepEqual(t.sent, [], "once taken, forgotten");
});

test("pieces too many to outlive the page in one request wait in the tab for its next load", async () => {
  const t = tab();
  const long = [{ offset: 0, text: "x".repeat(KEEPALIVE_MAX_BYTES), proof: "p0" }];
  t.load().leave([{ id: 7, pieces: long }, { id: 9, pieces: PIECES }]);
  assert.deepEqual(t.sent.map(({ id }) => id), [9], "browsers refuse keepalive bodies past 64 KiB in all");

  t.sent = [];
  await t.load().handBack();
  assert.deepEqual(t.sent.map(({ id, pieces }) => [id, pieces]), [[7, long], [9, PIECES]]);
});

test("pieces the server could not be reached for are kept for the load after; those it refused are not", async () => {
  const t = tab();
  t.load().leave([{ id: 7, pieces: PIECES }, { id: 8, pieces: PIECES }, { id: 9, pieces: PIECES }]);
  const refusals = { 7: new TypeError("Failed to fetch"), 8: new ApiError(502, "server_unreachable", "down"),
                     9: new ApiError(409, "generation_not_recoverable", "ended otherwise") };
  t.answer = (id) => Promise.reject(refusals[id]);
  await t.load().handBack();

  t.sent = [];
  t.answer = () => Promise.resolve({});
  await t.load().handBack();
  assert.deepEqual(t.sent.map(({ id }) => id), [7, 8]);
});

test("pieces left by a page that went while the tab was loading again are not lost", async () => {
  const t = tab();
  const page = t.load();
  t.load().leave([{ id: 7, pieces: PIECES }]);
  const answers = [];
  t.answer = () => new Promise((resolve) => { answers.push(resolve); });
  const handingBack = page.handBack();
  await settle();
  t.load().leave([{ id: 8, pieces: PIECES }]);
  for (const answer of answers) answer({});
  await handingBack;
  t.sent = [];
  t.answer = () => Promise.resolve({});
  await t.load().handBack();
  assert.deepEqual(t.sent.map(({ id }) => id), [8]);
});

test("signing out forgets them: they are not for the next person at this computer", async () => {
  const t = tab();
  t.load().leave([{ id: 7, pieces: PIECES }]);
  t.load().clear();
  t.sent = [];
  await t.load().handBack();
  assert.deepEqual(t.sent, []);
});

test("a storage that is full or blocked loses nothing else: the request still goes", () => {
  const t = tab();
  t.storage.setItem = () => { throw new DOMException("full", "QuotaExceededError"); };
  t.load().leave([{ id: 7, pieces: PIECES }]);
  assert.deepEqual(t.sent.map(({ id }) => id), [7]);
});

test("without session storage (the browser blocks it) the request still goes as the page leaves", async () => {
  const sent = [];
  const kept = createKeptPieces({ storage: null, recover: async (id) => { sent.push(id); } });
  kept.leave([{ id: 7, pieces: PIECES }]);
  await kept.handBack();
  kept.clear();
  assert.deepEqual(sent, [7]);
});
