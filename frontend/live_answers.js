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
  #stopping = new Map(); // conversation id -> the end of an answer stopped there

  /**
   * Resolves once an answer stopped in this conversation has ended at the server too, or after
   * `withinMs`: until then the server refuses another answer there (409 conversation_busy).
   */
  stopEnded(conversationId, withinMs = 5000) {
    const ended = this.#stopping.get(conversationId);
    if (!ended) return Promise.resolve();
    let timer;
    const late = new Promise((resolve) => { timer = setTimeout(resolve, withinMs); });
    return Promise.race([ended, late]).finally(() => clearTimeout(timer));
  }

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

  /**
   * Forgets an entry that ended; a newer answer of the same conversation stays. One that ended
   * by a Stop is still being written at the server until the Stop reaches it: its end is kept
   * for `stopEnded`.
   */
  remove(entry) {
    const { conversationId: id, generation } = entry;
    if (generation.stopped && generation.ended) {
      this.#stopping.set(id, generation.ended);
      generation.ended.finally(() => {
        if (this.#stopping.get(id) === generation.ended) this.#stopping.delete(id);
      });
    }
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

  /** `[{id, pieces}]`: what each answer holds that its server may lack (Generation.piecesAtRisk). */
  piecesAtRisk() {
    return this.entries().map(({ generation }) => ({ id: generation.id, pieces: generation.piecesAtRisk() }));
  }

  /**
   * Signing out: stops this page's own answers (the user's answers stop with the session) and
   * closes those it only watches (they go on for their other readers). Resolves once each Stop
   * has been tried once, or after `withinMs`: a Stop that reaches the server after the session
   * ended is refused, and its answer would run on for its grace, holding the model.
   */
  leaveAll(sendStop, withinMs = 3000) {
    const tries = this.entries().map(({ generation, watching }) => new Promise((tried) => {
      if (watching) {
        generation.close();
        tried();
        return;
      }
      const first = (...stop) => {
        const sent = sendStop(...stop);
        sent.then(tried, tried);
        return sent;
      };
      if (generation.stop(first) === null) tried();
    }));
    let timer;
    const late = new Promise((resolve) => { timer = setTimeout(resolve, withinMs); });
    return Promise.race([Promise.all(tries), late]).finally(() => clearTimeout(timer));
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
