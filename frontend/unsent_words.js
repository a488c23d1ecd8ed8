// What the user wrote and has not had stored: requests the server refused (it stored nothing of
// them), and what was still being written, in the composer or a message's editor, when the user
// opened another conversation, or the page went (a reload, a closed tab), or the session ended.
// Kept by conversation until they can go back where they were written. They live in the tab's
// session storage with the name of the user who wrote them: a reload finds them, another tab does
// not, another user who signs in on the page does not (they are forgotten then), and signing out
// forgets them.

import { tabStorage } from "./tab_storage.js";

const KEY = "chatapp.unsentWords";

/**
 * Words `{text, editOf}` (editOf: the id of the message they rewrite; null: a new message), by
 * conversation: at most one new message and one rewrite of each message per conversation. Those
 * of the conversation on screen go back at once and the others once it is shown again: a rewrite
 * into its message's editor, a new message (or a rewrite of a message no longer shown) into the
 * composer when that is empty (never into another conversation's, where Send would post them).
 * A rewrite of a message not shown waits while older messages are still to be drawn (its
 * message may be among them): given back, Send would post it as a new message.
 * @param {object} parts
 * @param {() => number|null} parts.shownId  the conversation on screen
 * @param {(messageId: string) => Element|null} parts.findMessage  that user message, if shown
 * @param {(el: Element, text: string) => boolean} parts.edit  opens its editor with the text;
 *   false when it cannot now (the words wait for the conversation to be shown again)
 * @param {(text: string) => void} parts.fillComposer
 * @param {Storage|null} [parts.storage]  the tab's session storage (tab_storage.js)
 * @param {EventTarget} [parts.page]  the window: as it goes (`pagehide`), what is being written is kept
 * @param {() => string} [parts.composerText]
 * @param {() => {text: string, editOf: string}[]} [parts.rewrites]  the editors open, changed
 * @param {() => boolean} [parts.hasOlder]  older messages of the conversation on screen are still
 *   to be drawn (call giveBack once they are)
 */
export function createUnsentWords({ shownId, findMessage, edit, fillComposer,
  storage = tabStorage(), page = null, composerText = () => "", rewrites = () => [], hasOlder = () => false }) {
  const kept = read();
  let unsent = kept.entries; // [conversation id, words]
  let owner = kept.owner; // the name of the user who wrote them (null: not known yet)
  let beforeLeaving = null; // what the page going replaced, should the same page be shown again
  let present = false; // someone is signed in on the page: the composer and conversations are theirs

  function read() {
    try {
      const stored = JSON.parse(storage?.getItem(KEY) ?? "null");
      const list = Array.isArray(stored) ? stored : stored?.unsent; // an array: kept before owners were
      return {
        owner: typeof stored?.owner === "string" ? stored.owner : null,
        entries: Array.isArray(list) ? list.filter((entry) => Array.isArray(entry) && typeof entry[1]?.text === "string") : [],
      };
    } catch {
      return { owner: null, entries: [] }; // unreadable or blocked: nothing kept
    }
  }

  function write() {
    try {
      if (unsent.length === 0) storage?.removeItem(KEY);
      else storage?.setItem(KEY, JSON.stringify({ owner, unsent }));
    } catch {
      // Full or blocked: they stay on this page only.
    }
  }

  const sameSlot = (id, editOf) => ([otherId, words]) => otherId === id && (words.editOf ?? null) === editOf;

  /** A new message's words join those held; a rewrite replaces the one of the same message. */
  function add(id, words) {
    const editOf = words.editOf ?? null;
    const held = unsent.find(sameSlot(id, editOf));
    if (held && editOf === null) held[1] = { text: `${held[1].text}\n\n${words.text}`, editOf: null };
    else if (held) held[1] = { text: words.text, editOf };
    else unsent.push([id, { text: words.text, editOf }]);
  }

  /** What is being written on screen, kept for the conversation on screen. */
  function keepWriting() {
    if (!present) return false;
    const id = shownId();
    const text = composerText();
    if (text.trim()) add(id, { text, editOf: null });
    for (const rewrite of rewrites()) add(id, rewrite);
    write();
    return true;
  }

  page?.addEventListener("pagehide", () => {
    const before = structuredClone(unsent);
    if (keepWriting()) beforeLeaving = before;
  });
  // Back from the back-forward cache, the page still shows those words: no second copy.
  page?.addEventListener("pageshow", (event) => {
    if (!event.persisted || beforeLeaving === null) return;
    unsent = beforeLeaving;
    beforeLeaving = null;
    write();
  });

  function giveBack() {
    if (!present) return; // not into a composer the next person signing in would find
    const id = shownId();
    const left = [];
    const isRewrite = ([, words]) => (words.editOf === null ? 0 : 1);
    // A new message's words first: the composer is theirs before a rewrite's whose message is gone.
    for (const entry of [...unsent].sort((a, b) => isRewrite(a) - isRewrite(b))) {
      const [entryId, words] = entry;
      const edited = entryId === id && words.editOf !== null && findMessage(words.editOf);
      if (entryId !== id) left.push(entry);
      else if (edited) {
        if (!edit(edited, words.text)) left.push(entry);
      } else if (words.editOf !== null && hasOlder()) left.push(entry); // its message may be older
      else if (!composerText()) fillComposer(words.text);
      else left.push(entry);
    }
    if (left.length === unsent.length) return;
    unsent = left;
    write();
  }

  return {
    /**
     * Conversation `id` is about to be shown: what is being written in another one stays with it
     * (in this one's composer Send would post it), given back when it is shown again.
     */
    opening(id) {
      if (id !== shownId() && keepWriting()) fillComposer("");
    },
    /** The session ends (signed out here or elsewhere, expired): its words leave the screen. */
    leaving() {
      keepWriting();
      fillComposer("");
      present = false;
    },
    /** `user` signed in: words another user left on this page are forgotten, never shown. */
    signedIn(user) {
      if (owner !== null && owner !== user) unsent = [];
      owner = user;
      present = true;
      write();
    },
    /** Keeps the words of conversation `id` (null: none); true when there were any. */
    keep(id, words) {
      if (words === null) return false;
      add(id, words);
      write();
      giveBack();
      return true;
    },
    /**
     * Conversation `id` is gone (deleted here or elsewhere): its words go to a new conversation's
     * composer, as those on screen do when it is deleted there.
     */
    gone(id) {
      const theirs = unsent.filter(([entryId]) => entryId === id);
      unsent = unsent.filter(([entryId]) => entryId !== id);
      for (const [, words] of theirs) add(null, { text: words.text, editOf: null }); // its messages too
      write();
      giveBack();
    },
    giveBack,
    /** Forgets them all (a sign-out): not for the next person at this computer. */
    clear() {
      unsent = [];
      owner = null;
      write();
    },
  };
}
