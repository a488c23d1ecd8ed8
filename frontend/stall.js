// A stream that sends nothing, not even the server's `: ping`, for two heartbeats has stalled:
// the connection is stuck somewhere on the way (a proxy, a dead network) and will never say so
// itself, so the page has to notice and end it.
export const STALL_HEARTBEATS = 2;

// Wrapped: a browser's setTimeout called as another object's method throws "Illegal invocation".
export const SYSTEM_CLOCK = {
  setTimeout: (callback, ms) => setTimeout(callback, ms),
  clearTimeout: (id) => clearTimeout(id),
  now: () => performance.now(),
};

/**
 * Calls `onStall` once, when no byte was seen for STALL_HEARTBEATS heartbeats after `arm`.
 * Bytes only note the time; one timer checks it when it is due (a flood of tokens costs no timer
 * each).
 * @param {() => void} onStall
 * @param {{setTimeout: Function, clearTimeout: Function, now: () => number}} [clock]
 */
export function createStallWatch(onStall, clock = SYSTEM_CLOCK) {
  let limitMs = null; // null until the stream says its heartbeat
  let lastByteAt = clock.now();
  let timer = null;
  let ended = false;

  function check() {
    timer = null;
    if (ended) return;
    const quietMs = clock.now() - lastByteAt;
    if (quietMs >= limitMs) {
      ended = true;
      onStall();
    } else {
      timer = clock.setTimeout(check, limitMs - quietMs);
    }
  }

  return {
    /** Starts watching, given the server's heartbeat in seconds; without one, nothing is watched. */
    arm(heartbeatS) {
      if (ended || !(heartbeatS > 0)) return;
      limitMs = heartbeatS * 1000 * STALL_HEARTBEATS;
      if (timer !== null) clock.clearTimeout(timer);
      timer = clock.setTimeout(check, Math.max(limitMs - (clock.now() - lastByteAt), 0));
    },
    /** Bytes arrived (events, pings, anything). */
    touch() {
      lastByteAt = clock.now();
    },
    cancel() {
      ended = true;
      if (timer !== null) clock.clearTimeout(timer);
      timer = null;
    },
  };
}
