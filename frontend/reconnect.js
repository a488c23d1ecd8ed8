// An answer outlives a lost connection: the server carries it on for `resume_grace_s` (its
// `start` says how long), and the page tries again to reach it, 0.5 s after the loss, then
// doubling, at once when the network comes back (docs/api.md, "Resuming an answer"). A Stop
// pressed meanwhile is kept and sent the same way until the server has it.

export const FIRST_RETRY_MS = 500;
const LONGEST_RETRY_MS = 8000;
// A Stop is sent for this long at most: a page open that long has been offline past any grace.
const STOP_DELIVERY_MS = 10 * 60 * 1000;

/** The next wait after one of `ms`. */
export const nextRetryMs = (ms) => Math.min(ms * 2, LONGEST_RETRY_MS);

/** An answer to a request that will never change: a 4xx other than timeout and too-many. */
export const isFinalRefusal = (error) =>
  error?.status >= 400 && error.status < 500 && error.status !== 408 && error.status !== 429;

/**
 * A wait of `ms`, cut short by the network coming back (`online` on `network`) or by `wake()`.
 * @returns {{done: Promise<void>, wake: () => void}}
 */
export function pause(ms, { clock, network }) {
  let wake;
  const done = new Promise((resolve) => {
    const timer = clock.setTimeout(() => wake(), ms);
    wake = () => {
      clock.clearTimeout(timer);
      network?.removeEventListener("online", wake);
      resolve();
    };
    network?.addEventListener("online", wake);
  });
  return { done, wake };
}

/**
 * A Stop's refusal that holds whenever it is sent again. Not a 401: the session ended (expired,
 * or signed out in another tab) and the user signs in again, after which the Stop is taken and
 * cuts the answer to what was seen; given up, the answer ran on to its end, holding the model.
 */
const isFinalStopRefusal = (error) => isFinalRefusal(error) && error.status !== 401;

/**
 * Sends a Stop (`send()` resolves when the server took it) until the server takes or refuses
 * it. `afterFirst(taken)` runs once the first attempt has settled, either way.
 */
export async function deliverStop(send, { clock, network, afterFirst = () => {} }) {
  const until = clock.now() + STOP_DELIVERY_MS;
  let waitMs = FIRST_RETRY_MS;
  for (let first = true; ; first = false) {
    let taken = false;
    try {
      await send();
      taken = true;
      return;
    } catch (error) {
      if (isFinalStopRefusal(error) || clock.now() >= until) return;
    } finally {
      if (first) afterFirst(taken);
    }
    await pause(waitMs, { clock, network }).done;
    waitMs = nextRetryMs(waitMs);
  }
}
