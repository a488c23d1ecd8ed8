import assert from "node:assert/strict";
import { test } from "node:test";

import { ApiError } from "../api.js";
import { KNOWN_CODES, sentenceFor } from "../errors.js";

const looksLikeASentence = (text) => /^[A-Z].*[.!?]$/.test(text) && !/\b[a-z]+_[a-z_]+\b/.test(text);

test("every known code reads as a sentence for people, with no code in it", () => {
  for (const code of KNOWN_CODES) {
    const sentence = sentenceFor(new ApiError(400, code, "developer words"));
    assert.ok(looksLikeASentence(sentence), `${code}: ${sentence}`);
    assert.ok(!sentence.includes("developer words"), code);
  }
});

test("a stream's error event is worded like the API's errors", () => {
  assert.equal(sentenceFor({ code: "upstream_disconnected", message: "the stream ended without [DONE]" }),
    "The model stopped partway through its answer. The text so far is kept.");
});

test("an unknown code gets a generic sentence, never the code", () => {
  const sentence = sentenceFor({ code: "quota_exceeded_by_gremlins", message: "x" });
  assert.equal(sentence, "Something went wrong. Please try again.");
});

test("the message limit and the wait before signing in again are named when known", () => {
  assert.match(sentenceFor(new ApiError(400, "message_too_long", "x"), { maxMessageChars: 8000 }), /8,000 characters/);
  const refused = new ApiError(429, "too_many_attempts", "x");
  refused.retryAfter = 120;
  assert.match(sentenceFor(refused), /wait 120 seconds/);
});

test("an answer that is not the API's JSON is worded by its status", () => {
  assert.match(sentenceFor(new ApiError(502, "http_error", "The server answered 502 Bad Gateway")), /can't be reached/);
  assert.equal(sentenceFor(new ApiError(500, "http_error", "x")), "Something went wrong. Please try again.");
});

test("a network failure says the server could not be reached", () => {
  assert.match(sentenceFor(new TypeError("Failed to fetch")), /^Could not reach the server\./);
});

test("the errors Django and nginx give under /api/ say what to do, not that something went wrong", () => {
  assert.match(sentenceFor(new ApiError(403, "csrf_failed", "CSRF check failed")), /Reload the page/);
  assert.match(sentenceFor(new ApiError(413, "body_too_large", "x")), /too much to send/);
  assert.match(sentenceFor(new ApiError(502, "server_unreachable", "x")), /can't be reached/);
  assert.match(sentenceFor(new ApiError(504, "server_timeout", "x")), /took too long/);
});

test("a message too long for the model is asked to be shorter, not moved: older messages are already left out", () => {
  const sentence = sentenceFor(new ApiError(400, "context_too_long", "x"));
  assert.match(sentence, /shorten it/);
  assert.doesNotMatch(sentence, /new conversation/);
});
