import assert from "node:assert/strict";
import { test } from "node:test";

import { createUnsentWords } from "../unsent_words.js";

/** A tab: its session storage, kept across its loads, and a page on it with a composer. */
function tab() {
  const items = new Map();
  const t = {
    storage: {
      getItem: (key) => items.get(key) ?? null,
      setItem: (key, value) => items.set(key, String(value)),
      removeItem: (key) => items.delete(key),
    },
    items,
  };
  t.load = ({ shown = 7, typed = "" } = {}) => {
    const page = new EventTarget();
    const loaded = { page, composer: typed, edited: [] };
    loaded.words = createUnsentWords({
      shownId: () => shown,
      findMessage: () => null,
      edit: (el, text) => loaded.edited.push(text),
      isComposerEmpty: () => loaded.composer === "",
      fillComposer: (text) => { loaded.composer = text; },
      storage: t.storage,
      page,
      composerText: () => loaded.composer,
    });
    return loaded;
  };
  return t;
}

const going = (page) => page.dispatchEvent(new Event("pagehide"));
function shownAgain(page, persisted) {
  const event = new Event("pageshow");
  event.persisted = persisted;
  page.dispatchEvent(event);
}

test("words being written in the composer come back in the same conversation after a reload", () => {
  const t = tab();
  going(t.load({ shown: 7, typed: "half a question" }).page);

  const elsewhere = t.load({ shown: 8 });
  elsewhere.words.giveBack();
  assert.equal(elsewhere.composer, "", "never into another conversation's composer");
  const again = t.load({ shown: 7 });
  again.words.giveBack();
  assert.equal(again.composer, "half a question");
  const after = t.load({ shown: 7 });
  after.words.giveBack();
  assert.equal(after.composer, "", "given back once");
});

test("a page shown again as it was keeps no second copy of its words", () => {
  const t = tab();
  const page = t.load({ shown: 7, typed: "half a question" }).page;
  going(page);
  shownAgain(page, true);

  const again = t.load({ shown: 7 });
  again.words.giveBack();
  assert.equal(again.composer, "");
});

test("words a refused request carried outlive a reload, and signing out forgets them", () => {
  const t = tab();
  t.load({ shown: 7, typed: "something else" }).words.keep(9, { text: "the refused question", editOf: null });
  const again = t.load({ shown: 9 });
  again.words.giveBack();
  assert.equal(again.composer, "the refused question");

  t.load({ shown: 7, typed: "x" }).words.keep(9, { text: "refused again", editOf: null });
  t.load().words.clear();
  const next = t.load({ shown: 9 });
  next.words.giveBack();
  assert.equal(next.composer, "");
  assert.equal(t.items.size, 0);
});
