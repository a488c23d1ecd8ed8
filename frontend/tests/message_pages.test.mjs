import assert from "node:assert/strict";
import { test } from "node:test";

import { cursorOf, historyOf, NO_HISTORY, withNewest, withOlder } from "../message_pages.js";

const messages = (...ids) => ids.map((id) => ({ id, role: id % 2 ? "user" : "assistant", content: `m${id}` }));
const page = (ids, hasOlder) => ({ results: messages(...ids), has_older: hasOlder });
const idsOf = (history) => history.messages.map((m) => m.id);

test("a conversation opens at its newest page, and reads the one before it from its first message", () => {
  const opened = historyOf(page([6, 7, 8], true));
  assert.deepEqual(idsOf(opened), [6, 7, 8]);
  assert.equal(cursorOf(opened), 6);
});

test("a history that holds the first message has no page before it", () => {
  assert.equal(cursorOf(historyOf(page([1, 2], false))), null);
  assert.equal(cursorOf(NO_HISTORY), null);
});

test("older pages go first, in order, until the first message", () => {
  let history = historyOf(page([7, 8, 9], true));
  history = withOlder(history, page([4, 5, 6], true));
  history = withOlder(history, page([1, 2, 3], false));
  assert.deepEqual(idsOf(history), [1, 2, 3, 4, 5, 6, 7, 8, 9]);
  assert.equal(cursorOf(history), null);
});

test("a message read twice is shown once", () => {
  const history = withOlder(historyOf(page([5, 6, 7], true)), page([3, 4, 5], true));
  assert.deepEqual(idsOf(history), [3, 4, 5, 6, 7]);
});

test("the newest page read again after an answer keeps the older pages shown", () => {
  const shown = withOlder(historyOf(page([5, 6, 7, 8], true)), page([1, 2, 3, 4], false));
  const after = withNewest(shown, page([7, 8, 9, 10], true)); // a question and its answer came
  assert.deepEqual(idsOf(after), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
  assert.equal(after.hasOlder, false, "the first message is still shown");
});

test("the newest page read again takes the place of what it holds: an edit's new text, and what went", () => {
  const shown = { messages: messages(1, 2, 3, 4, 5, 6), hasOlder: true };
  const edited = { results: [{ id: 3, role: "user", content: "new text" }, ...messages(7)], has_older: true };
  const after = withNewest(shown, edited);
  assert.deepEqual(idsOf(after), [1, 2, 3, 7]);
  assert.equal(after.messages[2].content, "new text");
  assert.equal(after.hasOlder, true);
});

test("a newest page that does not join what was read replaces it: no gap between them", () => {
  const shown = { messages: messages(1, 2, 3), hasOlder: true };
  const after = withNewest(shown, page([8, 9, 10], true)); // more came elsewhere than a page holds
  assert.deepEqual(idsOf(after), [8, 9, 10]);
  assert.equal(cursorOf(after), 8);
});

test("a newest page that holds the whole conversation is all of it", () => {
  const shown = { messages: messages(1, 2, 3, 4, 5), hasOlder: false };
  const after = withNewest(shown, page([1, 2], false)); // an edit of the second message elsewhere
  assert.deepEqual(idsOf(after), [1, 2]);
  assert.deepEqual(idsOf(withNewest(shown, page([], false))), []);
});
