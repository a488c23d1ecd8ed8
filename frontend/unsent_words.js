// What the user wrote in requests the server refused (it stored nothing of them), and what was
// still being written in the composer when the user opened another conversation, or the page
// went (a reload, a closed tab), or the session ended: kept by conversation until they can go
// back where they were written. They live in the tab's session storage with the name of the user
// who wrote them: a reload finds them, another tab does not, another user who signs in on the
// page does not (they are forgotten then), and signing out forgets them.

import { tabStorage } from "./tab_storage.js";

const KEY = "chatapp.unsentWords";

/**
 * Words a refused request carried, `{text, editOf}` (editOf: the id of the message they rewrite;
 * null: a new message), by conversation. Those of the conversation on screen go back at once and
 * the others once it is shown again: an edit's into its message's editor, a new message's into the
 * composer when that is empty (never into another conversation's, where Send would post them).
 * @param {object} parts
 * @param {() => number|null} parts.shownId  the conversation on screen
 * @param {(messageId: string) => Element|null} parts.findMessage  that user message, if shown
 * @param {(el: Element, text: string) => void} parts.edit  opens its editor with the text
 * @param {(text: string) => void} parts.fillComposer
 * @param {Storage|null} [parts.storage]  the tab's session storage (tab_storage.js)
 * @param {EventTarget} [parts.page]  the window: as it goes (`pagehide`), the composer's words are kept
 * @param {() => string} [parts.composerText]
 */
export function createUnsentWords({ shownId, findMessage, edit, fillComposer,
  storage = tabStorage(), page = null, composerText = () => "" }) {
  const kept = read();
  const unsent = new Map(kept.entries);
  let owner = kept.owner; // the name of the user who wrote them (null: not known yet)
  let beforeLeaving = null; // what the page going replaced, should the same page be shown again
  let present = false; // someone is signed in on the page: the composer and conversations are theirs

  function read() {
    try {
      const kept = JSON.parse(storage?.getItem(KEY) ?? "null");
      const list = Array.isArray(kept) ? kept : kept?.unsent; // an array: kept before owners were
      return {
        owner: typeof kept?.owner === "string" ? kept.owner : null,
        entries: Array.isArray(list) ? list.filter((entry) => Array.isArray(entry) && typeof entry[1]?.text === "string") : [],
      };
    } catch {
      return { owner: null, entries: [] }; // unreadable or blocked: nothing kept
    }
  }

  function write() {
    try {
      if (unsent.size === 0) storage?.removeItem(KEY);
      else storage?.setItem(KEY, JSON.stringify({ owner, unsent: [...unsent] }));
    } catch {
      // Full or blocked: they stay on this page only.
    }
  }

  function add(id, words) {
    const held = unsent.get(id);
    unsent.set(id, held ? { text: `${held.text}\n\n${words.text}`, editOf: null } : words);
    write();
  }

  page?.addEventListener("pagehide", () => {
    const text = composerText();
    if (!present || !text.trim()) return;
    const id = shownId();
    beforeLeaving = { id, held: unsent.get(id) };
    add(id, { text, editOf: null });
  });
  // Back from the back-forward cache, the page still shows those words: no second copy.
  page?.addEventListener("pageshow", (event) => {
    if (!event.persisted || beforeLeaving === null) return;
    const { id, held } = beforeLeaving;
    beforeLeaving = null;
    if (held) unsent.set(id, held);
    else unsent.delete(id);
    write();
  });

  function giveBack() {
    if (!present) return; // not into a composer the next person signing in would find
    const id = shownId();
    const words = unsent.get(id);
    if (!words) return;
    const edited = words.editOf !== null && findMessage(words.editOf);
    if (edited) {
      unsent.delete(id);
      write();
      edit(edited, words.text);
    } else if (!composerText()) {
      unsent.delete(id);
      write();
      fillComposer(words.text);
    }
  }

  /** The composer's words, kept for the conversation on screen; the composer is emptied. */
  function putAway() {
    const text = composerText();
    if (present && text.trim()) add(shownId(), { text, editOf: null });
    fillComposer("");
  }

  return {
    /**
     * Conversation `id` is about to be shown: the words being written in another one's composer
     * stay with it (Send would post them into this one), given back when it is shown again.
     */
    opening(id) {
      if (id !== shownId()) putAway();
    },
    /** The session ends (signed out here or elsewhere, expired): its words leave the screen. */
    leaving() {
      putAway();
      present = false;
    },
    /** `user` signed in: words another user left on this page are forgotten, never shown. */
    signedIn(user) {
      if (owner !== null && owner !== user) unsent.clear();
      owner = user;
      present = true;
      write();
    },
    /** Keeps the words of conversation `id` (null: none); true when there were any. */
    keep(id, words) {
      if (words === null) return false;
      add(id, words);
      giveBack();
      return true;
    },
    giveBack,
    /** Forgets them all (a sign-out): not for the next person at this computer. */
    clear() {
      unsent.clear();
      owner = null;
      write();
    },
  };
}
