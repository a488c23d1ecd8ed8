import assert from "node:assert/strict";
import { test } from "node:test";

import { hashOf, ROUTE, routeOf, showInAddress } from "../route.js";

test("a conversation's address is read back as that conversation, with or without the leading slash", () => {
  assert.deepEqual(routeOf(hashOf(42)), { kind: ROUTE.CONVERSATION, id: 42 });
  assert.deepEqual(routeOf("#c/7"), { kind: ROUTE.CONVERSATION, id: 7 });
});

test("no hash is a new conversation", () => {
  for (const hash of ["", "#", "#/"]) assert.deepEqual(routeOf(hash), { kind: ROUTE.NEW }, hash);
  assert.equal(hashOf(null), "");
});

test("a conversation's address that names no conversation is unknown, not a crash", () => {
  for (const hash of ["#/c/", "#/c/abc", "#/c/0", "#/c/12x", "#c/-3", `#/c/${"9".repeat(16)}`, "#/c"]) {
    assert.deepEqual(routeOf(hash), { kind: ROUTE.UNKNOWN }, hash);
  }
});

test("an in-page anchor such as the skip link's is left alone", () => {
  for (const hash of ["#composer", "#chat", "#cat"]) assert.deepEqual(routeOf(hash), { kind: ROUTE.OTHER }, hash);
});

function fakeWindow(hash = "") {
  const calls = [];
  const location = { pathname: "/", search: "", hash };
  const record = (how) => (state, title, url) => {
    calls.push([how, url]);
    location.hash = url.startsWith("#") ? url : "";
  };
  return { calls, location, history: { pushState: record("push"), replaceState: record("replace") } };
}

test("moving to another conversation is a step in the history; a correction replaces the step", () => {
  const env = fakeWindow("#/c/1");
  showInAddress(2, {}, env);
  showInAddress(null, { replace: true }, env);
  assert.deepEqual(env.calls, [["push", "#/c/2"], ["replace", "/"]]);
});

test("showing the conversation already in the address adds no step, however it is spelled", () => {
  const env = fakeWindow("#/c/3");
  showInAddress(3, {}, env);
  env.location.hash = "#c/3";
  showInAddress(3, {}, env);
  assert.deepEqual(env.calls, []);
});

test("leaving an in-page anchor for no conversation clears the address", () => {
  const env = fakeWindow("#composer");
  showInAddress(null, { replace: true }, env);
  assert.deepEqual(env.calls, [["replace", "/"]]);
});
