// What the user wrote in requests the server refused (it stored nothing of them), and what was
// still being written in the composer when the page went (a reload, a closed tab), kept by
// conversation until they can go back where they were written. They live in the tab's session
// storage: a reload finds them, another tab or person does not, and signing out forgets them.

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
 * @param {() => boolean} parts.isComposerEmpty
 * @param {(text: string) => void} parts.fillComposer
 * @param {Storage|null} [parts.storage]  the tab's session storage (tab_storage.js)
 * @param {EventTarget} [parts.page]  the window: as it goes (`pagehide`), the composer's words are kept
 * @param {() => string} [parts.composerText]
 */
export function createUnsentWords({ shownId, findMessage, edit, isComposerEmpty, fillComposer,
  storage = tabStorage(), page = null, composerText = () => "" }) {
  const unsent = new Map(read());
  let beforeLeaving = null; // what the page going replaced, should the same page be shown again

  function read() {
    try {
      const kept = JSON.parse(storage?.getItem(KEY) ?? "[]");
      return Array.isArray(kept) ? kept.filter((entry) => Array.isArray(entry) && typeof entry[1]?.text === "string") : [];
    } catch {
      return []; // unreadable or blocked: nothing kept
    }
  }

  function write() {
    try {
      if (unsent.size === 0) storage?.removeItem(KEY);
      else storage?.setItem(KEY, JSON.stringify([...unsent]));
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
    if (!text.trim()) return;
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
    const id = shownId();
    const words = unsent.get(id);
    if (!words) return;
    const edited = words.editOf !== null && findMessage(words.editOf);
    if (edited) {
      unsent.delete(id);
      write();
      edit(edited, words.text);
    } else if (isComposerEmpty()) {
      unsent.delete(id);
      write();
      fillComposer(words.text);
    }
  }

  return {
    /** Keeps the words of conversation `id` (null: none); true when there were any. */
    keep(id, words) {
      if (words === null) return false;
      add(id, words);
      giveBack();
      return true;
    },
    giveBack,
    /** Forgets them all: not for the next person at this computer. */
    clear() {
      unsent.clear();
      write();
    },
  };
}
