// Test doubles shared by the unit tests: byte streams and a hand-driven animation frame clock.

export const encoder = new TextEncoder();

/** A ReadableStream whose reads return exactly these chunks, one per read. */
export function streamOf(chunks) {
  return new ReadableStream({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(typeof chunk === "string" ? encoder.encode(chunk) : chunk);
      controller.close();
    },
  });
}

/** Splits bytes at the given offsets (sorted, within 1..length-1). */
export function splitAt(bytes, offsets) {
  const chunks = [];
  let from = 0;
  for (const offset of offsets) {
    chunks.push(bytes.slice(from, offset));
    from = offset;
  }
  chunks.push(bytes.slice(from));
  return chunks;
}

/** A stream the test feeds by hand; `signal` aborting errors it, as fetch does. */
export function controlledStream(signal) {
  let controller;
  const stream = new ReadableStream({ start(c) { controller = c; } });
  signal?.addEventListener("abort", () => controller.error(new DOMException("The operation was aborted.", "AbortError")));
  return {
    stream,
    push: (text) => controller.enqueue(encoder.encode(text)),
    close: () => controller.close(),
    error: (reason) => controller.error(reason), // the connection broke (a reset)
  };
}

export const sse = (event, payload) => `event: ${event}\ndata: ${JSON.stringify(payload)}\n\n`;

/** Lets queued reads and promise callbacks run. */
export const settle = () => new Promise((resolve) => setImmediate(resolve));

/** requestAnimationFrame and document.hidden, advanced by the test. */
export function fakeFrames() {
  const callbacks = new Map();
  const listeners = new Set();
  let nextId = 1;
  const document = {
    hidden: false,
    addEventListener: (type, listener) => type === "visibilitychange" && listeners.add(listener),
    removeEventListener: (type, listener) => listeners.delete(listener),
  };
  return {
    document,
    requestAnimationFrame(callback) {
      const id = nextId++;
      callbacks.set(id, callback);
      return id;
    },
    cancelAnimationFrame: (id) => callbacks.delete(id),
    /** Runs one frame: every callback requested before it. */
    frame() {
      const due = [...callbacks.values()];
      callbacks.clear();
      for (const callback of due) callback(performance.now());
    },
    pending: () => callbacks.size,
    listeners: () => listeners.size,
    setHidden(hidden) {
      document.hidden = hidden;
      for (const listener of [...listeners]) listener();
    },
  };
}

/** A clock the test moves by hand: timers fire when `advance` passes their time. */
export function fakeClock() {
  let now = 0;
  let nextId = 1;
  const timers = new Map();
  return {
    now: () => now,
    setTimeout(callback, ms) {
      const id = nextId++;
      timers.set(id, { at: now + ms, callback });
      return id;
    },
    clearTimeout: (id) => timers.delete(id),
    advance(ms) {
      const until = now + ms;
      for (;;) {
        const due = [...timers.entries()].filter(([, t]) => t.at <= until).sort((a, b) => a[1].at - b[1].at)[0];
        if (!due) break;
        timers.delete(due[0]);
        now = due[1].at;
        due[1].callback();
      }
      now = until;
    },
    pending: () => timers.size,
  };
}
