// One answer being streamed: its AbortController, its text, and how much of it was painted.
// Kept free of the DOM so the accounting that Stop relies on can be tested under node.
// The same object reads an answer's own stream (POST, from `start`) and the watch stream of an
// answer another tab or device started (GET .../events, from `prefix`), and, when either is
// lost, resumes it from the last character it holds (reconnect.js).
import { ProvenPieces } from "./proven_pieces.js";
import { deliverStop, FIRST_RETRY_MS, isFinalRefusal, nextRetryMs, pause } from "./reconnect.js";
import { createStallWatch, SYSTEM_CLOCK } from "./stall.js";
import { payloadOf, readEvents } from "./stream.js";
import { CANCELLED_BY, STATUS } from "./vocabulary.js";

// A stopped answer's stream ends within this of the server taking the Stop, or is closed here.
export const STOPPED_STREAM_END_MS = 5000;

/** How an answer ended when no `done` event said so. */
export const ENDING = Object.freeze({
  REFUSED: "refused", // the request was answered with a JSON error before any stream
  LOST: "connection_lost", // the stream ended without `done`
  STALLED: "connection_stalled", // nothing arrived for two heartbeats: the page ended the stream
  EXPIRED: "resume_expired", // lost, and not reached again within the server's grace period
});

export class Generation {
  /**
   * @param {object} options
   * @param {string} [options.baseText] text already in the message (Continue appends to it)
   * @param {(text: string) => void} options.paint writes the plain text to the screen
   * @param {(paint: () => void) => {schedule(): void, cancel(): void}} options.createPainter
   *   decides when `paint` may run (at most once a frame, never while hidden)
   * @param {(start: object) => void} [options.onStart]
   * @param {(onStall: () => void) => {arm(s: number): void, touch(): void, cancel(): void}} [options.watchStall]
   * @param {((id: number, offset: number) => (signal: AbortSignal) => Promise<Response>) | null} [options.resume]
   *   opens the answer's stream again from a character offset; null: a lost stream is not resumed
   * @param {(isReconnecting: boolean) => void} [options.onReconnecting]
   * @param {((id: number, pieces: object[]) => Promise<unknown>) | null} [options.recover]
   *   hands back pieces of this generation's text the server lost (its relay died before saving them)
   * @param {EventTarget | null} [options.network] fires `online` and `offline` (the window)
   */
  constructor({
    baseText = "", paint, createPainter, onStart = () => {}, watchStall = createStallWatch, resume = null,
    onReconnecting = () => {}, recover = null, clock = SYSTEM_CLOCK, network = globalThis.window ?? null,
  }) {
    this.controller = new AbortController();
    this.baseText = baseText;
    this.text = ""; // every delta of this generation, appended the moment it arrives
    this.chars = 0; // code points in this.text
    this.pieces = new ProvenPieces(); // each delta's, to hand back should the server lose it
    this.storedCut = null; // a `prefix` shorter than this.text: applied, or handed back, at `done`
    this.paintedLength = 0; // this.text.length when it was last painted
    this.paintedChars = 0; // code points of this.text the user has seen
    this.start = null;
    this.done = null;
    this.error = null;
    this.stopped = false;
    this.isClosed = false; // read no more, without a Stop (close())
    this.stalled = false;
    this.pendingStop = null; // a Stop pressed before the server named the generation
    this.reconnecting = false;
    this.graceExpired = false;
    this.onStart = onStart;
    this.resume = resume;
    this.onReconnecting = onReconnecting;
    this.recover = recover;
    this.clock = clock;
    this.network = network;
    this.retryWith = { clock, network }; // what a wait before trying again listens to
    this.wake = null; // ends the wait before the next try to reconnect
    // Offline, an open response may never fail by itself: end it and reconnect.
    this.wentOffline = () => { if (!this.reconnecting) this.controller.abort(); };
    this.paintNow = () => {
      this.paintedLength = this.text.length;
      this.paintedChars = this.chars;
      paint(this.baseText + this.text);
    };
    this.painter = createPainter(this.paintNow);
    this.watchStall = watchStall;
    this.stall = this.#newStallWatch();
  }

  #endRun = () => {}; // settles run() at once, with the outcome as it stands

  #newStallWatch() {
    const watch = this.watchStall(() => {
      if (this.done) return;
      // After Stop too: a silent stream is a dead one, not worth holding open for the Stop.
      this.stalled = true;
      this.controller.abort();
    });
    // A resumed stream is watched from its first byte on: one that never sends its `resume`
    // would otherwise never be armed. The heartbeat is the answer's, said by its `start`.
    if (this.start) watch.arm(this.start.heartbeat_s);
    return watch;
  }

  get id() {
    return this.start?.generation_id ?? null;
  }

  /**
   * Opens the stream with `open(signal)` (which resolves to the Response or rejects with the
   * API's error) and reads it to the end, or until Stop: the answer ends on screen then, while
   * the stream is read on, unpainted, until the server has the Stop. Resolves to the outcome;
   * never rejects.
   */
  run(open) {
    const stopped = new Promise((resolve) => { this.#endRun = () => resolve(this.outcome()); });
    this.ended = this.#follow(open); // after a Stop, once the server has it and the stream ends
    return Promise.race([this.ended, stopped]);
  }

  async #follow(open) {
    this.network?.addEventListener("offline", this.wentOffline);
    try {
      let response;
      try {
        response = await open(this.controller.signal);
      } catch (error) {
        // Refused, Stop or not: nothing was started, and the page must say why and keep the text.
        return { ending: ENDING.REFUSED, error, status: STATUS.FAILED, text: this.baseText };
      }
      await this.#read(response);
      while (this.#isResumable() && await this.#reconnect());
      // Ended once the record holds it: the page reads the stored answer next, which must not
      // take back what the user saw.
      await this.pieces.handedBack;
      // Lost where the server keeps no answer for a page to resume (no grace period): its web
      // process may have died with text it had not saved, so all the page holds goes back, the
      // outcome not waiting on it (a stalled network would hold the answer "Writing…").
      if (!this.done && !this.stopped && !this.isClosed && !(this.start?.resume_grace_s > 0)) this.#handBack(0);
      return this.outcome();
    } finally {
      this.network?.removeEventListener("offline", this.wentOffline);
      this.painter.cancel();
      this.stall.cancel();
    }
  }

  async #read(response) {
    try {
      for await (const event of readEvents(response, { onBytes: () => this.stall.touch() })) this.#handle(event);
    } catch {
      // An aborted or broken read: Stop, a reconnect or "connection lost" tells which.
    }
  }

  #isResumable() {
    return !this.stopped && !this.isClosed && !this.done && !this.error && this.id !== null
      && this.resume !== null && this.start?.resume_grace_s > 0;
  }

  /**
   * The stream was lost: "Reconnecting…" and tries, 0.5 s after, doubling, within the grace
   * period. Resolves true once a resumed stream was read (to its end or its next loss), false
   * when the answer is not to be resumed (Stop, the grace passed, a final refusal).
   */
  async #reconnect() {
    const deadline = this.clock.now() + this.start.resume_grace_s * 1000;
    let waitMs = FIRST_RETRY_MS;
    this.#setReconnecting(true);
    try {
      for (;;) {
        const wait = pause(Math.max(Math.min(waitMs, deadline - this.clock.now()), 0), this.retryWith);
        this.wake = wait.wake;
        await wait.done;
        if (this.stopped || this.isClosed) return false;
        waitMs = nextRetryMs(waitMs);
        this.controller = new AbortController();
        this.stalled = false;
        this.stall.cancel();
        this.stall = this.#newStallWatch();
        let response;
        try {
          response = await this.resume(this.id, this.chars)(this.controller.signal);
        } catch (error) {
          if (this.stopped || this.isClosed || isFinalRefusal(error)) return false;
          if (this.clock.now() >= deadline) {
            this.graceExpired = true;
            return false;
          }
          continue;
        }
        this.#setReconnecting(false);
        await this.#read(response);
        return true;
      }
    } finally {
      this.wake = null;
      this.#setReconnecting(false);
    }
  }

  #setReconnecting(on) {
    if (this.reconnecting === on) return;
    this.reconnecting = on;
    // Stopped or closed, the answer has ended on screen: a resume that ends later (the Stop's
    // wait for the stream, a stall) must not say it is being written again.
    if (!this.stopped && !this.isClosed) this.onReconnecting(on);
  }

  #handle(event) {
    const payload = payloadOf(event);
    if (payload === undefined || payload === null) return;
    switch (event.event) {
      case "start":
        this.#started(payload);
        break;
      case "prefix":
        // A watched answer: the text saved so far, which replaces what is shown. A prefix shorter
        // than what this page holds comes when a Stop elsewhere cut the answer, or when its relay
        // died before saving all it sent: `done` tells which (#settleCut). For a continued
        // answer its first `earlier_chars` characters came before this generation: they are the
        // base text, which a Stop from here does not count as seen.
        this.#started(payload);
        if (!this.stopped && typeof payload.text === "string") {
          const chars = Array.from(payload.text);
          const earlier = Math.min(Math.max(payload.earlier_chars ?? 0, 0), chars.length);
          const cut = { baseText: chars.slice(0, earlier).join(""), text: chars.slice(earlier).join(""), chars: chars.length - earlier };
          if (cut.chars < this.chars && this.text.startsWith(cut.text)) this.storedCut = cut;
          else this.#show(cut);
        }
        break;
      case "resume":
        // The answer again, its deltas from the offset asked (this.chars): nothing to replace.
        // Stored short of what this page holds (its relay died between two saves, or a live
        // one's saves lag): the rest goes back now, before the answer is ended from the shorter
        // text (by the reaper, or by a Stop the user presses while nothing comes).
        this.stall.arm(payload.heartbeat_s);
        if (Number.isInteger(payload.stored_chars)) {
          this.pieces.saved(payload.stored_chars); // the record keeps those
          if (payload.stored_chars < this.chars) this.#handBack(payload.stored_chars);
        }
        break;
      case "delta":
        // After Stop the text is what the user saw; what still arrives was never shown.
        if (!this.stopped && typeof payload.text === "string" && payload.text !== "") {
          // Deltas are whole JSON strings, so counting each one alone never splits a pair.
          const chars = Array.from(payload.text).length;
          if (typeof payload.proof === "string") {
            const start = this.text.length;
            this.pieces.add({ offset: this.chars, chars, start, end: start + payload.text.length, proof: payload.proof });
          }
          this.text += payload.text;
          this.chars += chars;
          this.painter.schedule();
        }
        if (Number.isInteger(payload.saved)) this.pieces.saved(payload.saved); // stored: safe
        break;
      case "error":
        this.error = payload;
        // The relay could not store the answer (its database stayed away): what the user saw goes back.
        if (payload.code === "database_unavailable") this.#handBack(0);
        break;
      case "done":
        this.done = payload;
        this.#settleCut();
        break;
    }
  }

  /** Shows `cut`, a prefix's text, in place of this generation's: deltas before it are gone. */
  #show(cut) {
    this.baseText = cut.baseText;
    this.text = cut.text;
    this.chars = cut.chars;
    this.pieces.clear();
    this.painter.schedule();
  }

  /**
   * The answer ended shorter than this page holds. Failed, its relay died before saving what it
   * sent (the user saw it): the page keeps its text and hands back, with their proofs, the pieces
   * past the stored end. Else a Stop elsewhere cut it, which the page shows.
   */
  #settleCut() {
    const cut = this.storedCut;
    this.storedCut = null;
    if (!cut) return;
    if (this.done.status !== STATUS.FAILED || !this.recover || this.id === null) {
      this.#show(cut);
      return;
    }
    this.#handBack(cut.chars);
  }

  /** Hands back, with their proofs, the pieces this page holds past the first `storedChars`. */
  #handBack(storedChars) {
    if (!this.recover || this.id === null) return;
    const id = this.id;
    this.pieces.handBack((lost) => this.recover(id, lost), storedChars, this.text);
  }

  /**
   * What this page holds that the record may lack, should the page go now (kept_pieces.js): all
   * it holds while its stream is lost (its web process may have died with some of it, and no
   * resumed stream has said how much the record keeps), and what a hand-back not yet answered
   * carries (the page going would cancel it). Else none: a live relay keeps what it sent.
   */
  piecesAtRisk() {
    if (this.id === null) return [];
    return this.reconnecting ? this.pieces.past(0, this.text) : this.pieces.unanswered(this.text);
  }

  #started(payload) {
    this.start = payload;
    this.stall.arm(payload.heartbeat_s);
    this.onStart(payload);
    if (this.pendingStop) {
      const send = this.pendingStop;
      this.pendingStop = null;
      send();
    }
  }

  /**
   * The user pressed Stop: keep exactly what was painted and tell the server how much that
   * was. Returns the number of code points reported, or null when there was nothing to stop.
   */
  stop(sendStop) {
    if (this.stopped || this.done || this.isClosed) return null;
    this.stopped = true;
    const seen = this.paintedChars;
    this.painter.cancel();
    // The Stop is recorded before the connection closes: closed first, the answer would go on
    // for the grace period as a departed page's. A Stop that cannot reach the server is sent
    // again until it does (with the same count), so the stored text becomes what was seen.
    const send = () => deliverStop(() => sendStop(this.id, seen),
      { ...this.retryWith, afterFirst: (taken) => this.#closeAfterStop(taken) });
    // Lost, the stream may have died with its web process before that saved all it sent, and
    // no resumed stream will say how much the record holds: the page hands back all it has
    // (the server keeps what it lacks). Unreachable, the server's relay lives on and keeps it.
    if (this.reconnecting) this.#handBack(0);
    this.wake?.(); // a wait to reconnect ends: no more tries
    // Before `start` the server may be starting the answer already: the Stop waits for its id,
    // so that it is recorded as the user's too. A request refused instead says so in `ended`,
    // for the caller to give the words back. The answer ends on screen now either way, not when
    // the server has the Stop: the user saw it end, and a stuck network must not keep it "Writing…".
    if (this.id === null) this.pendingStop = send;
    else send();
    this.#endRun();
    return seen;
  }

  /**
   * After the first try at sending the Stop. Taken, the server writes the stopped answer, then
   * ends its stream, and until then refuses another answer in the conversation (409
   * conversation_busy): the stream is read to that end (`ended`, unpainted), closed if it has
   * not come within STOPPED_STREAM_END_MS. Not taken, it is closed at once (the Stop is sent
   * again meanwhile).
   */
  #closeAfterStop(taken) {
    const { controller } = this;
    if (!taken) {
      controller.abort();
      return;
    }
    const wait = pause(STOPPED_STREAM_END_MS, { clock: this.clock });
    this.ended.finally(wait.wake);
    wait.done.then(() => controller.abort());
  }

  /**
   * This page reads no more of the answer, and sends no Stop: the answer goes on at the server
   * for its other readers (signing out while watching one), or the server ended it already (its
   * conversation was deleted). A plain abort would read as a lost connection and be resumed.
   */
  close() {
    if (this.done || this.isClosed) return;
    this.isClosed = true;
    this.painter.cancel();
    this.wake?.();
    this.controller.abort();
    this.#endRun();
  }

  /**
   * How it ended. `cancelledBy` is what this page knows; an answer stopped elsewhere says ""
   * here, and the stored message tells who.
   */
  outcome() {
    const common = { start: this.start, done: this.done, error: this.error, cancelledBy: "" };
    if (this.stopped) {
      const seen = this.text.slice(0, this.paintedLength);
      return { ...common, status: STATUS.STOPPED, cancelledBy: CANCELLED_BY.USER, text: this.baseText + seen };
    }
    if (this.done) {
      // The message's status, which is the generation's but where a continuation failed: that
      // leaves its answer truncated, to be continued again (null: the message is gone).
      const status = this.done.message_status ?? this.done.status;
      return { ...common, status, text: this.baseText + this.text };
    }
    const text = this.baseText + this.text;
    if (this.error) return { ...common, status: STATUS.FAILED, text };
    // The connection closed (or was closed here) before `done`: the server, if it noticed,
    // kept the text it sent and recorded the answer as interrupted.
    const ending = this.graceExpired ? ENDING.EXPIRED : this.stalled ? ENDING.STALLED : ENDING.LOST;
    return { ...common, ending, status: STATUS.STOPPED, cancelledBy: CANCELLED_BY.CLIENT_GONE, text };
  }
}
