// Reads a server-sent event stream out of a fetch response body.
// EventSource cannot POST or send our CSRF header, so we parse the stream ourselves.
import { createParser } from "./vendor/eventsource-parser.js";

/**
 * Yields `{event, data, id}` for every event in `source` (a Response or a ReadableStream of
 * bytes), in order, as soon as the bytes that complete it have arrived.
 * `event` is "message" when the stream named none; comments (`: ping`) yield nothing, but
 * every read that brings bytes, a comment's too, calls `onBytes` (a stall is no byte at all).
 * Ends when the body ends; throws what the read throws (an AbortError after a Stop).
 */
export async function* readEvents(source, { onBytes = () => {} } = {}) {
  const body = typeof source.getReader === "function" ? source : source.body;
  const reader = body.getReader();
  // stream: true keeps the bytes of a character split across two reads until the rest arrives.
  const decoder = new TextDecoder("utf-8");
  let ready = [];
  const parser = createParser({
    onEvent: ({ event, data, id }) => ready.push({ event: event || "message", data, id }),
  });
  const take = () => {
    const batch = ready;
    ready = [];
    return batch;
  };
  let finished = false;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      onBytes();
      parser.feed(decoder.decode(value, { stream: true }));
      yield* take();
    }
    finished = true;
    // A server that closes right after an event's last line, without the blank line that ends
    // it (or without even the final newline), still meant that event: end it for it. If
    // that line was cut short, its data is incomplete and the caller's JSON.parse says so.
    parser.feed(`${decoder.decode()}\n\n`);
    yield* take();
  } finally {
    if (finished) {
      reader.releaseLock();
    } else {
      // The caller stopped early (or the read failed): let the connection go.
      reader.cancel().catch(() => {});
    }
  }
}

/** The JSON payload of an event, or undefined when it is not valid JSON. */
export function payloadOf(event) {
  try {
    return JSON.parse(event.data);
  } catch {
    return undefined;
  }
}
