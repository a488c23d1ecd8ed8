import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { CANCELLED_BY, CANCELLERS, FINISH, FINISH_REASONS, MESSAGE_STATUSES, STATUS } from "../vocabulary.js";

// The Python side is the source: read the values of its StrEnum classes.
const python = readFileSync(new URL("../../common/vocabulary.py", import.meta.url), "utf8");
function enumValues(className) {
  const body = python.split(new RegExp(`^class ${className}\\b.*$`, "m"))[1].split(/^\S/m)[0];
  return [...body.matchAll(/^\s+[A-Z_]+\s*=\s*"([^"]+)"/gm)].map((m) => m[1]);
}

test("statuses and finish reasons match common/vocabulary.py", () => {
  assert.deepEqual([...MESSAGE_STATUSES], enumValues("MessageStatus"));
  assert.deepEqual([...FINISH_REASONS], enumValues("FinishReason"));
  assert.deepEqual([...CANCELLERS], enumValues("CancelledBy"));
});

test("the vocabulary cannot be changed at run time", () => {
  for (const frozen of [MESSAGE_STATUSES, FINISH_REASONS, CANCELLERS, STATUS, FINISH, CANCELLED_BY]) assert.ok(Object.isFrozen(frozen));
  assert.equal(STATUS.TRUNCATED, "truncated");
  assert.equal(FINISH.CONTENT_FILTER, "content_filter");
  assert.equal(CANCELLED_BY.CLIENT_GONE, "client_gone");
});
