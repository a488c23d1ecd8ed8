import assert from "node:assert/strict";
import { beforeEach, test } from "node:test";

import { api, ApiError, openStream } from "../api.js";

// api.js reads document.cookie and calls fetch: both are stand-ins here.
let calls;
let answers;
globalThis.document = { cookie: "sessionid=s; csrftoken=tok%3D1" };
globalThis.fetch = async (url, init) => {
  calls.push({ url, ...init });
  const next = answers.shift();
  return typeof next === "function" ? next() : next;
};
const jsonResponse = (status, body) =>
  new Response(body === undefined ? null : JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });

beforeEach(() => {
  calls = [];
  answers = [];
});

test("unsafe methods carry the CSRF cookie's value; GET does not", async () => {
  answers.push(jsonResponse(200, { user: { username: "a" } }), jsonResponse(200, { results: [] }));
  await api.login("a", "b");
  await api.conversations("x y", "1765126800000000.42");
  assert.equal(calls[0].headers["X-CSRFToken"], "tok=1");
  assert.equal(calls[0].method, "POST");
  assert.deepEqual(JSON.parse(calls[0].body), { username: "a", password: "b" });
  assert.equal(calls[1].headers["X-CSRFToken"], undefined);
  assert.equal(calls[1].url, "/api/conversations?q=x+y&after=1765126800000000.42");
  assert.equal(calls[1].credentials, "same-origin");
});

test("an error answer becomes an ApiError with the server's code and message", async () => {
  answers.push(jsonResponse(409, { error: { code: "nothing_to_regenerate", message: "no answer" } }));
  await assert.rejects(api.messages(3), (error) => error instanceof ApiError && error.status === 409
    && error.code === "nothing_to_regenerate" && error.message === "no answer");
  answers.push(new Response("<html>bad gateway</html>", { status: 502, statusText: "Bad Gateway" }));
  await assert.rejects(api.messages(3), { status: 502, code: "http_error" });
});

test("DELETE's 204 is null", async () => {
  answers.push(new Response(null, { status: 204 }));
  assert.equal(await api.deleteConversation(4), null);
  assert.equal(calls[0].method, "DELETE");
});

test("one conversation is read with a GET of its address", async () => {
  answers.push(jsonResponse(200, { id: 3, title: "Quick soup recipes" }));
  assert.deepEqual(await api.conversation(3), { id: 3, title: "Quick soup recipes" });
  assert.equal(calls[0].url, "/api/conversations/3");
  assert.equal(calls[0].method ?? "GET", "GET");
});

test("a stream opens only on an event-stream answer", async () => {
  const signal = new AbortController().signal;
  answers.push(new Response("event: start\n\n", { status: 200, headers: { "Content-Type": "text/event-stream" } }));
  const response = await api.send(5, "hi")(signal);
  assert.equal(response.status, 200);
  assert.equal(calls[0].url, "/api/conversations/5/messages");
  assert.equal(calls[0].signal, signal);
  assert.equal(calls[0].headers.Accept, "text/event-stream");
  answers.push(jsonResponse(200, {}));
  await assert.rejects(openStream("/x", undefined, signal), { code: "not_a_stream" });
  answers.push(jsonResponse(429, { error: { code: "too_many_streams", message: "slow down" } }));
  await assert.rejects(api.regenerate(5)(signal), { status: 429 });
});

test("the watch stream of an answer is a GET without a CSRF header", async () => {
  const signal = new AbortController().signal;
  answers.push(new Response("event: prefix\n\n", { status: 200, headers: { "Content-Type": "text/event-stream" } }));
  await api.watch(9)(signal);
  assert.equal(calls[0].url, "/api/generations/9/events");
  assert.equal(calls[0].method, "GET");
  assert.equal(calls[0].headers["X-CSRFToken"], undefined);
  assert.equal(calls[0].headers.Accept, "text/event-stream");
  assert.equal(calls[0].signal, signal);
});

test("Stop sends seen_chars once: the page's Stop delivery (reconnect.js) is what tries again", async () => {
  answers.push(jsonResponse(500, undefined), jsonResponse(202, { stopping: true }));
  await assert.rejects(api.stop(7, 13), { status: 500 });
  assert.equal(calls.length, 1);
  assert.equal(calls[0].url, "/api/generations/7/stop");
  assert.deepEqual(JSON.parse(calls[0].body), { seen_chars: 13 });
  assert.deepEqual(await api.stop(7, 13), { stopping: true });
});

test("a regenerate and an edit name the last message the page shows and its length, for the server to refuse a stale page", async () => {
  const stream = () => new Response("", { status: 200, headers: { "Content-Type": "text/event-stream" } });
  answers.push(stream(), stream());
  const signal = new AbortController().signal;
  await api.regenerate(5, { id: 41, chars: 12 })(signal);
  await api.edit(6, "rewritten", { id: 41, chars: null })(signal);
  assert.deepEqual(calls.map((call) => [call.url, JSON.parse(call.body)]), [
    ["/api/conversations/5/regenerate", { last_message_id: 41, last_message_chars: 12 }],
    ["/api/messages/6/edit", { content: "rewritten", last_message_id: 41, last_message_chars: null }],
  ]);
});

test("what the user wrote goes without a NUL, which the server cannot store and nobody sees", async () => {
  const stream = () => new Response("", { status: 200, headers: { "Content-Type": "text/event-stream" } });
  answers.push(stream(), stream(), jsonResponse(200, {}), jsonResponse(200, {}), jsonResponse(201, {}), jsonResponse(200, { results: [] }));
  const signal = new AbortController().signal;
  await api.send(5, "copied from a log\u0000 line")(signal);
  await api.edit(6, "\u0000rewritten")(signal);
  await api.renameConversation(5, "Log\u0000 notes");
  await api.updateConversation(5, { system_prompt: "Be\u0000 brief", temperature: 0.5 });
  await api.createConversation({ model: "m", system_prompt: "Terse\u0000" });
  await api.conversations("log\u0000");
  assert.deepEqual(calls.slice(0, 5).map((call) => JSON.parse(call.body)), [
    { content: "copied from a log line" }, { content: "rewritten", last_message_id: null, last_message_chars: null }, { title: "Log notes" },
    { system_prompt: "Be brief", temperature: 0.5 }, { model: "m", system_prompt: "Terse" },
  ]);
  assert.equal(calls[5].url, "/api/conversations?q=log"); // the first page: no cursor
});

test("half an emoji the user pasted goes as the replacement character it shows as, which the server stores", async () => {
  // A page that cut an emoji in two UTF-16 units leaves a lone surrogate in what is copied from
  // it: the composer draws it as U+FFFD, and the server refuses it (400 invalid_value) for good.
  const stream = () => new Response("", { status: 200, headers: { "Content-Type": "text/event-stream" } });
  answers.push(stream(), stream(), jsonResponse(200, {}), jsonResponse(200, {}), jsonResponse(201, {}), jsonResponse(200, { results: [] }));
  const signal = new AbortController().signal;
  await api.send(5, "cut \uD83D here")(signal);
  await api.edit(6, "\uDE00cut 😀")(signal);
  await api.renameConversation(5, "Notes \uD83D");
  await api.updateConversation(5, { system_prompt: "Be\uDC00 brief" });
  await api.createConversation({ system_prompt: "Terse\uD83D" });
  await api.conversations("cut \uD83D");
  assert.deepEqual(calls.slice(0, 5).map((call) => JSON.parse(call.body)), [
    { content: "cut \uFFFD here" }, { content: "\uFFFDcut 😀", last_message_id: null, last_message_chars: null }, { title: "Notes \uFFFD" },
    { system_prompt: "Be\uFFFD brief" }, { system_prompt: "Terse\uFFFD" },
  ]);
  assert.equal(calls[5].url, `/api/conversations?${new URLSearchParams({ q: "cut \uFFFD" })}`);
});

test("a password change sends both passwords, and a refusal's reasons come as its details", async () => {
  const reasons = ["This password is too short. It must contain at least 8 characters."];
  answers.push(jsonResponse(400, { error: { code: "invalid_password", message: reasons[0], details: reasons } }),
    jsonResponse(400, { error: { code: "wrong_password", message: "old_password is not this account's password" } }));
  await assert.rejects(api.changePassword("old one", "short"),
    (error) => error.code === "invalid_password" && error.details.length === 1 && error.details[0] === reasons[0]);
  await assert.rejects(api.changePassword("old one", "short"), (error) => error.code === "wrong_password"
    && Array.isArray(error.details) && error.details.length === 0);
  assert.equal(calls[0].url, "/api/auth/password");
  assert.equal(calls[0].headers["X-CSRFToken"], "tok=1");
  assert.deepEqual(JSON.parse(calls[0].body), { old_password: "old one", new_password: "short" });
});
