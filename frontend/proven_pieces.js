// The pieces of an answer's text a page was sent, each with the server's proof of it, and what
// the page hands back of them when the server may lack them (docs/api.md, recover).

export class ProvenPieces {
  #pieces = []; // {offset, chars: code points; start, end: UTF-16 indexes in the text; proof}
  #unanswered = new Set(); // the stored counts of hand-backs not yet answered
  handedBack = null; // settles once every hand-back so far was answered (taken or refused)

  /** A delta: at `offset` code points, `chars` long, `text.slice(start, end)` of the page's. */
  add(piece) {
    this.#pieces.push(piece);
  }

  /** The record holds the first `savedChars` code points: their pieces need not be kept. */
  saved(savedChars) {
    this.#pieces = this.#pieces.filter((piece) => piece.offset + piece.chars > savedChars);
  }

  /** The text they were pieces of was replaced. */
  clear() {
    this.#pieces = [];
  }

  /** Those past the first `storedChars` code points, as `recover` takes them, out of `text`. */
  past(storedChars, text) {
    return this.#pieces.filter((piece) => piece.offset + piece.chars > storedChars)
      .map(({ offset, start, end, proof }) => ({ offset, text: text.slice(start, end), proof }));
  }

  /** Hands back, by `recover(pieces)`, those past the first `storedChars`. */
  handBack(recover, storedChars, text) {
    const lost = this.past(storedChars, text);
    if (lost.length === 0) return;
    this.#unanswered.add(storedChars);
    // Refused or unreachable, the record stays as the server had it; the page still shows it all.
    const answered = recover(lost).catch(() => {}).finally(() => this.#unanswered.delete(storedChars));
    this.handedBack = Promise.all([this.handedBack, answered]);
  }

  /** Those that hand-backs not yet answered carry (the page going would cancel them). */
  unanswered(text) {
    return this.#unanswered.size > 0 ? this.past(Math.min(...this.#unanswered), text) : [];
  }
}
