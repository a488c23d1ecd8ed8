// The answers this page is reading, at most one per conversation, whether their conversation is
// on screen or not: leaving a conversation mid-answer keeps reading it (only Stop stops it), the
// conversation list marks it as writing, and coming back paints it again where it is shown.

/**
 * An entry: `{conversationId, generation, el}`, where `el` is the message element the answer
 * paints into while its conversation is on screen, and null while it is not.
 */
export class LiveAnswers {
  #entries = new Map();
  #listeners = new Set();

  /** The answer being read in this conversation, or null. */
  get(conversationId) {
    return this.#entries.get(conversationId) ?? null;
  }

  add(conversationId, generation, el = null) {
    const entry = { conversationId, generation, el };
    this.#entries.set(conversationId, entry);
    this.#changed();
    return entry;
  }

  /** Forgets an entry that ended; a newer answer of the same conversation stays. */
  remove(entry) {
    if (this.#entries.get(entry.conversationId) !== entry) return;
    this.#entries.delete(entry.conversationId);
    this.#changed();
  }

  /** Ids of the conversations with an answer being written. */
  conversationIds() {
    return new Set(this.#entries.keys());
  }

  entries() {
    return [...this.#entries.values()];
  }

  /** Leaving a conversation: its answer keeps streaming, painted nowhere. */
  detachAll() {
    for (const entry of this.#entries.values()) entry.el = null;
  }

  onChange(listener) {
    this.#listeners.add(listener);
  }

  #changed() {
    const ids = this.conversationIds();
    for (const listener of this.#listeners) listener(ids);
  }
}
