// What the user wrote in requests the server refused (it stored nothing of them), kept by
// conversation until they can go back where they were written.

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
 */
export function createUnsentWords({ shownId, findMessage, edit, isComposerEmpty, fillComposer }) {
  const unsent = new Map();

  function giveBack() {
    const id = shownId();
    const words = unsent.get(id);
    if (!words) return;
    const edited = words.editOf !== null && findMessage(words.editOf);
    if (edited) {
      unsent.delete(id);
      edit(edited, words.text);
    } else if (isComposerEmpty()) {
      unsent.delete(id);
      fillComposer(words.text);
    }
  }

  return {
    /** Keeps the words of conversation `id` (null: none); true when there were any. */
    keep(id, words) {
      if (words === null) return false;
      const held = unsent.get(id);
      unsent.set(id, held ? { text: `${held.text}\n\n${words.text}`, editOf: null } : words);
      giveBack();
      return true;
    },
    giveBack,
    /** Forgets them all: not for the next person at this computer. */
    clear: () => unsent.clear(),
  };
}
