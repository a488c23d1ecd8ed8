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
  /** A page loaded on the tab, `user` signed in (null: nobody yet), conversation `shown` open. */
  t.load = ({ shown = 7, typed = "", user = "ann", messages = [], rewrites = [], editable = true,
    older = false } = {}) => {
    const page = new EventTarget();
    const loaded = { page, composer: typed, edited: [], shown, rewrites, editable, messages, older };
    loaded.words = createUnsentWords({
      shownId: () => loaded.shown,
      findMessage: (id) => (loaded.messages.includes(id) ? id : null),
      rewrites: () => loaded.rewrites,
      edit: (el, text) => loaded.editable && loaded.edited.push([el, text]) > 0,
      fillComposer: (text) => { loaded.composer = text; },
      storage: t.storage,
      page,
      composerText: () => loaded.composer,
      hasOlder: () => loaded.older,
    });
    if (user !== null) loaded.words.signedIn(user);
    /** Opens conversation `id`, as app.js's showConversation does. */
    loaded.open = (id) => {
      loaded.words.opening(id);
      loaded.shown = id;
      loaded.words.giveBack();
    };
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

test("words being written stay with their conversation when another is opened", () => {
  const page = tab().load({ shown: 7, typed: "half a question" });

  page.open(8);
  assert.equal(page.composer, "", "Send would post them into the other conversation");
  page.composer = "for eight";
  page.open(null); // a new conversation, not yet created
  assert.equal(page.composer, "");
  page.open(7);
  assert.equal(page.composer, "half a question");
  page.open(7);
  assert.equal(page.composer, "half a question", "the same conversation again keeps its composer");
  page.open(8);
  assert.equal(page.composer, "for eight");
});

test("words left when the session ended come back to the same user, never to another", () => {
  const t = tab();
  const page = t.load({ shown: 7, typed: "a long reply" });
  page.words.leaving();
  assert.equal(page.composer, "", "off the screen the sign-in form replaces");
  page.words.giveBack();
  assert.equal(page.composer, "", "nobody is signed in");

  page.words.signedIn("ann");
  page.words.giveBack();
  assert.equal(page.composer, "a long reply");

  page.words.leaving();
  const reloaded = t.load({ shown: 7, user: null });
  reloaded.words.signedIn("bob");
  reloaded.words.giveBack();
  assert.equal(reloaded.composer, "");
  assert.equal(t.items.size, 0, "forgotten, not only hidden");
});

test("words kept before they had an owner go to whoever signs in first", () => {
  const t = tab();
  t.storage.setItem("chatapp.unsentWords", JSON.stringify([[7, { text: "kept by an older page", editOf: null }]]));

  const page = t.load({ shown: 7 });
  page.words.giveBack();
  assert.equal(page.composer, "kept by an older page");
});

test("a rewrite under way comes back into its message's editor, the composer's words into the composer", () => {
  const t = tab();
  const rewrite = { text: "put better", editOf: "31" };
  going(t.load({ shown: 7, typed: "a new question", rewrites: [rewrite] }).page);

  const again = t.load({ shown: 7, messages: ["31"] });
  again.words.giveBack();
  assert.deepEqual(again.edited, [["31", "put better"]]);
  assert.equal(again.composer, "a new question");
});

test("a rewrite of a message in a page not drawn yet waits for it, not in the composer", () => {
  const t = tab();
  going(t.load({ shown: 7, rewrites: [{ text: "put better", editOf: "31" }] }).page);

  const again = t.load({ shown: 7, messages: ["40"], older: true });
  again.words.giveBack();
  assert.equal(again.composer, "", "Send would post it as a new message");
  again.messages.push("31"); // its older page drawn
  again.older = false;
  again.words.giveBack();
  assert.deepEqual(again.edited, [["31", "put better"]]);
  assert.equal(again.composer, "");
});

test("a later rewrite of the same message replaces the earlier one", () => {
  const page = tab().load({ shown: 7, typed: "first", rewrites: [{ text: "put better", editOf: "31" }] });
  page.open(8);
  page.open(7); // message 31 is not shown: its rewrite waits for an empty composer
  assert.equal(page.composer, "first");
  page.composer = "first and more";
  page.rewrites = [{ text: "put better still", editOf: "31" }];
  page.open(8);

  page.open(7);
  assert.equal(page.composer, "first and more");
  page.composer = "";
  page.words.giveBack();
  assert.equal(page.composer, "put better still");
});

test("a rewrite whose editor cannot open now waits for its conversation to be shown again", () => {
  const t = tab();
  going(t.load({ shown: 7, rewrites: [{ text: "put better", editOf: "31" }] }).page);

  const busy = t.load({ shown: 7, messages: ["31"], editable: false }); // an answer is being written there
  busy.words.giveBack();
  assert.deepEqual(busy.edited, []);
  assert.equal(busy.composer, "", "not into the composer: its message is there");
  busy.editable = true;
  busy.open(8);
  busy.open(7);
  assert.deepEqual(busy.edited, [["31", "put better"]]);
});

test("words kept for a conversation found gone go to a new conversation's composer", () => {
  const t = tab();
  const page = t.load({ shown: 7, typed: "half a question" });
  page.open(8); // 7 is then deleted from another tab

  page.words.gone(7);
  page.open(null);
  assert.equal(page.composer, "half a question", "kept for 7, they could never come back");
  page.composer = "";
  const again = t.load({ shown: 7 });
  again.words.giveBack();
  assert.equal(again.composer, "", "given back once");
  assert.equal(t.items.size, 0);
});
