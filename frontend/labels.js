// The words on an answer's state line, and which answers are offered Retry: one place, so that
// an answer says the same thing while it ends and after a reload.
import { ENDING } from "./generation.js";
import { CANCELLED_BY, STATUS } from "./vocabulary.js";

const STATUS_LABELS = {
  [STATUS.STREAMING]: "Writing…",
  [STATUS.STOPPED]: "Stopped",
  [STATUS.TRUNCATED]: "Cut short at the length limit",
  [STATUS.FAILED]: "Failed",
};
export const INTERRUPTED = "Interrupted";
// What the page saw happen, said only while it happens (after a reload only the server's record is left).
const ENDING_DETAILS = {
  [ENDING.LOST]: "the connection was lost; the text so far is kept.",
  [ENDING.STALLED]: "the connection stalled; the text so far is kept.",
  [ENDING.EXPIRED]: "the connection was lost for longer than the server keeps an answer; the text so far is kept.",
};
// A page that only follows an answer loses its view, not the answer, which may well go on.
const FOLLOWING_DETAILS = {
  [ENDING.LOST]: "The connection was lost while following this answer; Retry follows it again.",
  [ENDING.STALLED]: "The connection stalled while following this answer; Retry follows it again.",
  [ENDING.EXPIRED]: "The connection was lost while following this answer; Retry follows it again.",
};

/** Cut short by no one's choice: the connection closed under it, or the server was stopping. */
export function isInterrupted({ status, cancelledBy }) {
  return status === STATUS.STOPPED
    && (cancelledBy === CANCELLED_BY.CLIENT_GONE || cancelledBy === CANCELLED_BY.SHUTDOWN);
}

/**
 * The state line of an answer: `status` and `cancelledBy` as the API spells them, and `ending`
 * (an ENDING) when the page's stream ended without the server saying how; `isFollowed` when
 * that stream was the watch stream of an answer this page did not start; `generationStatus`:
 * the status of its latest generation, as stored.
 */
export function answerLabel({ status, cancelledBy = "", ending, isFollowed = false, generationStatus }) {
  if (isFollowed && FOLLOWING_DETAILS[ending]) return FOLLOWING_DETAILS[ending];
  if (ENDING_DETAILS[ending]) return `${INTERRUPTED}: ${ENDING_DETAILS[ending]}`;
  if (isInterrupted({ status, cancelledBy })) return INTERRUPTED;
  if (status === STATUS.STOPPED && cancelledBy === CANCELLED_BY.TIMEOUT) return "Stopped at the time limit";
  if (status === STATUS.STOPPED && cancelledBy === CANCELLED_BY.ADMIN) return "Stopped by an administrator";
  if (status === STATUS.STOPPED && cancelledBy === CANCELLED_BY.SIGNED_OUT) return "Stopped when its session signed out";
  // A continuation that failed left its answer truncated where it failed, not at the limit.
  if (status === STATUS.TRUNCATED && generationStatus === STATUS.FAILED) return "Cut short where continuing it failed";
  return STATUS_LABELS[status] || "";
}

/** Offered Retry instead of Regenerate: the answer failed, or was cut short by accident. */
export function offersRetry({ status, cancelledBy }) {
  return status === STATUS.FAILED || isInterrupted({ status, cancelledBy });
}
