// The open conversation's history as the server stores it: shown from its newest page, older
// pages drawn above as the reader asks for them, the newest read again where the page may have
// it wrong (a refused request, an answer's end), and its live answer followed on screen.
import { ApiError } from "./api.js";
import { shownOf } from "./message_list.js";
import { cursorOf, NO_HISTORY, withNewest, withOlder } from "./message_pages.js";
import * as msg from "./messages.js";
import { STATUS } from "./vocabulary.js";

// Scrolled this close to the top, the reader is about to need the page before.
const NEAR_TOP_PX = 200;

/** A 404: the conversation (or message) is gone, deleted here or elsewhere. */
export const isGone = (error) => error instanceof ApiError && error.status === 404;

/** A 400 invalid_cursor: the message named as the page's start is no longer there (docs/api.md). */
const isDroppedCursor = (error) =>
  error instanceof ApiError && error.status === 400 && error.code === "invalid_cursor";

/**
 * @param {object} parts
 * @param {{messages: (id: number, options?: {before?: number}) => Promise<object>}} parts.api the
 *   newest page of a conversation's messages, or the page before a message (`{results, has_older}`)
 * @param {import("./live_answers.js").LiveAnswers} parts.live the answers being read
 * @param {object} parts.messageList the list on screen (message_list.js)
 * @param {HTMLElement} parts.list its element
 * @param {HTMLButtonElement} parts.earlier "Show earlier messages", shown while there are some
 * @param {(text: string) => void} parts.announce tells screen readers
 * @param {() => number | null} parts.shownId the conversation on screen
 * @param {(el: HTMLElement, generationId: number) => void} parts.watch follows an answer this page did not start
 * @param {() => void} parts.syncStreaming Send or Stop, as the conversation on screen now is
 * @param {(error: Error) => void} parts.failed says why a request failed
 * @param {(id: number) => void} parts.foundGone the conversation was found deleted
 * @param {() => void} [parts.olderShown] an older page was drawn above the messages shown
 */
export function createHistory({
  api, live, messageList, list, earlier, announce, shownId, watch, syncStreaming, failed, foundGone,
  olderShown = () => {},
}) {
  let read = NO_HISTORY; // the open conversation's pages as the server last told them, oldest first
  let readingBefore = null; // the cursor of the older page being read, if one is
  let isFollowingScroll = true; // off after a failed read of an older page: the button tries again
  let learning = 0; // reads of the newest page under way after an answer's end (learnIds)

  /**
   * The open conversation's answer, if one is being written: read on in the background since the
   * user left it (it has more than the server saved), or else watched as the server has it.
   */
  function followLiveAnswer(lastMessage) {
    const last = list.lastElementChild;
    const isStreamingAnswer = last?.dataset.role === "assistant" && last.dataset.status === STATUS.STREAMING;
    const entry = live.get(shownId());
    if (entry) {
      const el = isStreamingAnswer ? last : messageList.newAnswer();
      entry.el = el;
      if (entry.watching) el.dataset.watched = "true"; // followed, not this page's own (labels, Retry)
      msg.beginStreaming(el);
      if (!entry.generation.stopped) entry.generation.paintNow();
      if (entry.generation.reconnecting) msg.setState(el, "Reconnecting…");
      return;
    }
    if (isStreamingAnswer && lastMessage?.generation) watch(last, lastMessage.generation.id);
  }

  /**
   * Shows `history` (message_pages.js). Opened, the conversation shows its newest messages; drawn
   * again (`keepPlace`), the reader stays where they were, unless they were at the bottom.
   */
  function render(history, { keepPlace = false } = {}) {
    const { scrollTop } = list;
    const follow = !keepPlace || messageList.isFollowing();
    read = history;
    isFollowingScroll = true;
    live.detachAll(); // their elements are about to go
    const shown = messageList.show(history.messages);
    followLiveAnswer(shown.at(-1));
    syncStreaming();
    const moved = showEarlierButton(); // first: the button takes room from the list
    if (follow) messageList.scrollToBottom();
    else list.scrollTop = scrollTop + moved; // what came before the newest page is drawn as it was
    offerEarlier();
  }

  /**
   * Shows the button while older messages are there to read, hidden otherwise. It stands above
   * the list, which gains or gives up its room: returned, how far the list's top moved, for the
   * scroll to move as far and the messages to stay where the reader sees them.
   */
  function showEarlierButton() {
    const isHidden = cursorOf(read) === null;
    if (earlier.hidden === isHidden) return 0;
    const top = list.getBoundingClientRect().top;
    earlier.hidden = isHidden;
    return list.getBoundingClientRect().top - top;
  }

  /** The button shows while older messages are there to read; with too few to scroll, they are read at once. */
  function offerEarlier() {
    const moved = showEarlierButton();
    if (moved) list.scrollTop += moved;
    const isUnscrollable = list.clientHeight > 0 && list.scrollHeight <= list.clientHeight;
    if (!earlier.hidden && isUnscrollable && isFollowingScroll) showEarlier();
  }

  /** Draws the page before the messages shown above them, the reader's place kept. */
  async function showEarlier() {
    const id = shownId();
    const before = cursorOf(read);
    if (before === null || readingBefore === before) return;
    readingBefore = before;
    earlier.setAttribute("aria-busy", "true");
    const wasFocused = document.activeElement === earlier;
    try {
      const page = await api.messages(id, { before });
      if (id !== shownId() || cursorOf(read) !== before) return; // elsewhere, or drawn anew meanwhile
      const readBefore = read.messages.length;
      read = withOlder(read, page);
      const older = read.messages.slice(0, read.messages.length - readBefore);
      const drawn = messageList.prepend(older, live.get(id) !== null);
      announce(`${drawn} earlier ${drawn === 1 ? "message" : "messages"} shown.`);
      offerEarlier();
      olderShown();
      // Pressed from the keyboard, the button may hide: the focus goes to the messages it showed.
      if (wasFocused && earlier.hidden) list.focus({ preventScroll: true });
    } catch (error) {
      if (id !== shownId()) return;
      if (isGone(error) && !live.get(id)) foundGone(id);
      else if (isDroppedCursor(error) && !live.get(id)) readAnew(id, error);
      else {
        isFollowingScroll = false; // else each scroll would ask again, and fail again
        failed(error);
      }
    } finally {
      if (readingBefore === before) readingBefore = null;
      earlier.removeAttribute("aria-busy");
    }
  }

  /**
   * An edit elsewhere dropped the message the page before was to be read from, and with it every
   * message shown (all are later): the conversation is read anew from its newest page, the reader
   * left where they were, among the older messages, and the page they asked for read on from there.
   */
  async function readAnew(id, error) {
    isFollowingScroll = false; // a scroll meanwhile would ask from the dropped message again
    failed(error); // says the conversation changed elsewhere (a failed read says so after it)
    if (!(await reload(id))) return foundGone(id);
    if (id === shownId() && list.scrollTop < NEAR_TOP_PX) showEarlier();
  }

  earlier.addEventListener("click", () => showEarlier());
  list.addEventListener("scroll", () => {
    if (isFollowingScroll && list.scrollTop < NEAR_TOP_PX && cursorOf(read) !== null) showEarlier();
  }, { passive: true });

  /** Shows the conversation as stored; false when it is gone (the caller calls foundGone). */
  async function reload(id, { orAsLastRead = false } = {}) {
    try {
      const page = await api.messages(id);
      if (id === shownId() && !live.get(id)) render(withNewest(read, page), { keepPlace: true });
    } catch (error) {
      if (isGone(error)) return false;
      failed(error);
      // Not reached: as last read, without what the page showed of the request not taken.
      if (orAsLastRead && id === shownId() && !live.get(id)) render(read, { keepPlace: true });
    }
    return true;
  }

  /** The ids the server gave the messages on screen; its history instead where they differ. */
  async function learnIds(id) {
    let page;
    learning += 1;
    try {
      page = await api.messages(id);
    } catch (error) {
      if (isGone(error) && !live.get(id)) foundGone(id); // deleted meanwhile
      return;
    } finally {
      learning -= 1;
    }
    if (id !== shownId() || live.get(id)) return;
    const history = withNewest(read, page);
    if (messageList.learnIds(shownOf(history.messages))) {
      read = history;
      offerEarlier();
    } else {
      render(history, { keepPlace: true });
    }
  }

  /**
   * The last message on screen, as a Regenerate or an edit names it (null: none, or its id not
   * known yet): its id, and the length of its text as last read from the server, in code points
   * as the server counts them (null: not read yet, or being read again). A message that keeps
   * its id changes only by growing (an answer continued elsewhere): its length tells the server
   * what this page missed.
   */
  function shownLast() {
    const id = Number(list.lastElementChild?.dataset.messageId) || null;
    if (id === null) return null;
    // An answer this page has just written or followed is read back a moment after its end; until
    // then the page holds more of it than it read, and its id alone says what it has seen.
    const message = learning === 0 ? read.messages.find((m) => m.id === id) : undefined;
    return { id, chars: message ? [...message.content].length : null };
  }

  return { render, reload, learnIds, shownLast, hasOlder: () => cursorOf(read) !== null };
}
