import assert from "node:assert/strict";
import { test } from "node:test";

import { ENDING } from "../generation.js";
import { answerLabel, INTERRUPTED, offersRetry } from "../labels.js";

test("each way an answer ends has its own words", () => {
  assert.equal(answerLabel({ status: "streaming" }), "Writing…");
  assert.equal(answerLabel({ status: "completed" }), "");
  assert.equal(answerLabel({ status: "stopped", cancelledBy: "user" }), "Stopped");
  assert.equal(answerLabel({ status: "stopped", cancelledBy: "client_gone" }), INTERRUPTED);
  assert.equal(answerLabel({ status: "stopped", cancelledBy: "shutdown" }), INTERRUPTED);
  assert.equal(answerLabel({ status: "stopped", cancelledBy: "timeout" }), "Stopped at the time limit");
  assert.equal(answerLabel({ status: "stopped", cancelledBy: "admin" }), "Stopped by an administrator");
  assert.equal(answerLabel({ status: "stopped", cancelledBy: "signed_out" }), "Stopped when its session signed out");
  assert.equal(answerLabel({ status: "truncated" }), "Cut short at the length limit");
  assert.equal(answerLabel({ status: "failed" }), "Failed");
});

test("an answer whose continuation failed says so, not that it met the length limit", () => {
  assert.equal(answerLabel({ status: "truncated", generationStatus: "failed" }), "Cut short where continuing it failed");
  assert.equal(answerLabel({ status: "truncated", generationStatus: "truncated" }),
    "Cut short at the length limit");
});

test("a connection lost or stalled under the page says so, and starts as it will read after a reload", () => {
  const lost = answerLabel({ status: "stopped", cancelledBy: "client_gone", ending: ENDING.LOST });
  const stalled = answerLabel({ status: "stopped", cancelledBy: "client_gone", ending: ENDING.STALLED });
  assert.match(lost, /^Interrupted: the connection was lost/);
  assert.match(stalled, /^Interrupted: the connection stalled/);
  assert.equal(answerLabel({ status: "stopped", cancelledBy: "client_gone" }), "Interrupted");
});

test("a connection not reached again within the grace period says the server no longer keeps the answer", () => {
  const expired = answerLabel({ status: "stopped", cancelledBy: "client_gone", ending: ENDING.EXPIRED });
  assert.match(expired, /^Interrupted: the connection was lost for longer than the server keeps an answer/);
  const followed = answerLabel({ status: "stopped", cancelledBy: "client_gone", ending: ENDING.EXPIRED, isFollowed: true });
  assert.match(followed, /while following this answer; Retry follows it again\.$/);
});

test("a page that only followed an answer says it lost the answer's view, not the answer", () => {
  for (const ending of [ENDING.LOST, ENDING.STALLED]) {
    const label = answerLabel({ status: "stopped", cancelledBy: "client_gone", ending, isFollowed: true });
    assert.match(label, /while following this answer; Retry follows it again\.$/);
    assert.doesNotMatch(label, /Interrupted/);
  }
});

test("Retry is offered to failed and interrupted answers, not to ones the user stopped", () => {
  assert.equal(offersRetry({ status: "failed", cancelledBy: "" }), true);
  assert.equal(offersRetry({ status: "stopped", cancelledBy: "client_gone" }), true);
  assert.equal(offersRetry({ status: "stopped", cancelledBy: "user" }), false);
  assert.equal(offersRetry({ status: "completed", cancelledBy: "" }), false);
  assert.equal(offersRetry({ status: "truncated", cancelledBy: "" }), false);
});
