// The open conversation's messages on screen: drawn from the stored history, answers added,
// painted and finished as they stream, their ids learnt afterwards, the clicks on their
// controls, and the scroll that follows new text while the user is at the bottom. Which
// conversation and which answers are live is app.js's to know.
import { sentenceFor } from "./errors.js";
import { answerLabel } from "./labels.js";
import * as msg from "./messages.js";
import { copyWithFeedback } from "./render.js";
import { STATUS } from "./vocabulary.js";

const NEAR_BOTTOM_PX = 80;
const AT_BOTTOM_PX = 2; // scrollTop is fractional on dense screens
const VISIBLE_ROLES = new Set(["user", "assistant"]);

/** The stored messages a conversation shows (a system prompt is not one). */
export const shownOf = (messages) => messages.filter((m) => VISIBLE_ROLES.has(m.role));

/**
 * @param {object} parts
 * @param {HTMLElement} parts.list the messages' container
 * @param {HTMLElement} parts.empty shown while the conversation has no message
 * @param {(text: string) => void} parts.announce
 */
export function createMessageList({ list, empty, announce }) {
  const fromBottom = () => list.scrollHeight - list.scrollTop - list.clientHeight;
  // Whether new text takes the reader down with it, decided by how they scroll, not by where the
  // text finds them: a finger dragged slowly back moves a few pixels a frame, and a paint that
  // asked "near the end?" took it back each time. Moving up leaves the end (unless the list
  // only shrank under a reader at its end); moving down to near it follows again.
  let following = true;
  let lastTop = list.scrollTop;
  list.addEventListener("scroll", () => {
    const top = list.scrollTop;
    if (fromBottom() < AT_BOTTOM_PX) following = true;
    else if (top < lastTop) following = false;
    else if (top > lastTop && fromBottom() < NEAR_BOTTOM_PX) following = true;
    lastTop = top;
  }, { passive: true });
  const scrollToBottom = () => {
    list.scrollTop = list.scrollHeight;
    lastTop = list.scrollTop;
    following = true;
  };

  return {
    /** Whether the reader is at the end of the messages, and new text should keep them there. */
    isFollowing: () => following,
    scrollToBottom,

    /** Draws the stored history, unscrolled (a live answer may join it first); returns what it shows. */
    show(messages) {
      const shown = shownOf(messages);
      list.replaceChildren(...shown.map(msg.messageFromApi));
      msg.markContextStart(list, msg.contextStartOf(shown));
      empty.hidden = list.children.length > 0;
      return shown;
    },

    /**
     * Draws stored messages older than those shown above them, the reader's place kept: what
     * was in view stays where it was on the screen. Returns how many it shows.
     */
    prepend(messages, streaming) {
      const shown = shownOf(messages);
      const fromBottom = list.scrollHeight - list.scrollTop;
      list.prepend(...shown.map(msg.messageFromApi));
      list.scrollTop = list.scrollHeight - fromBottom;
      msg.markContextStart(list, list.dataset.contextFrom || null); // it may be in these
      msg.refreshActions(list, streaming);
      empty.hidden = list.children.length > 0;
      return shown.length;
    },

    newAnswer() {
      const el = msg.createMessage({ role: "assistant", status: STATUS.STREAMING });
      list.append(el);
      empty.hidden = true;
      return el;
    },

    paint(el, text) {
      const follow = following;
      msg.paintStreaming(el, text);
      window.chatappStats.paints += 1;
      if (follow) scrollToBottom();
    },

    setReconnecting(el, on) {
      el.dataset.reconnecting = String(on);
      msg.setState(el, on ? "Reconnecting…" : answerLabel({ status: STATUS.STREAMING }));
      if (on) announce("Connection lost; reconnecting.");
    },

    /** An answer's end as its stream told it; `streaming`: another answer here still streams. */
    finish(el, outcome, streaming) {
      const { done, error, ending, status, cancelledBy } = outcome;
      const isFollowed = el.dataset.watched === "true";
      let state = answerLabel({ status, cancelledBy, ending, isFollowed, generationStatus: done?.status });
      if (error) state = `${status === STATUS.TRUNCATED ? state : "Failed"}: ${sentenceFor(error)}`;
      const follow = following;
      const started = performance.now();
      delete el.dataset.reconnecting; // ended: no stream of it is lost or back any more
      msg.finishMessage(el, {
        status, cancelledBy, text: outcome.text, state, error: ending || error?.code,
        figures: done && { ttftMs: done.ttft_ms, tokens: done.usage?.completion_tokens },
      });
      window.chatappStats.finalRenderMs = performance.now() - started;
      msg.refreshActions(list, streaming);
      if (follow) scrollToBottom();
      announce(status === STATUS.COMPLETED ? "Answer complete." : `Answer: ${state}`);
    },

    /**
     * Answers and user messages appear before the server names them: gives them the ids (and an
     * answer its stored ending) of `stored`, the shown history as stored, without rendering
     * anything twice. False, changing nothing, when the two do not match one to one.
     */
    learnIds(stored) {
      const shown = [...list.querySelectorAll(".message")];
      if (shown.length !== stored.length || shown.some((el, i) => el.dataset.role !== stored[i].role)) {
        return false;
      }
      shown.forEach((el, i) => {
        if (!el.dataset.messageId) el.dataset.messageId = String(stored[i].id);
        // The stream's done does not say who stopped an answer; the stored record does.
        if (el.dataset.role === "assistant") msg.settleFromApi(el, stored[i]);
      });
      msg.markContextStart(list, msg.contextStartOf(stored));
      msg.refreshActions(list, false);
      return true;
    },

    /** A message's controls: Copy is done here, the others are the caller's. */
    onControl({ edit, reopen, regenerate, continueAnswer }) {
      list.addEventListener("click", (event) => {
        const control = event.target.closest("button");
        const el = control?.closest(".message");
        if (!el || control.disabled) return;
        if (control.classList.contains("copy-answer")) copyWithFeedback(control, msg.textOf(el));
        else if (control.classList.contains("edit")) edit(el);
        else if (control.classList.contains("retry") && el.dataset.watched && el.dataset.error) {
          reopen(); // the watch broke, not the answer: see where it stands now
        } else if (control.classList.contains("regenerate") || control.classList.contains("retry")) regenerate();
        else if (control.classList.contains("continue")) continueAnswer(el);
      });
    },
  };
}
