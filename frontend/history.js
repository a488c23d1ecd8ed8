// The open conversation's history as the server stores it: shown, read again where the page may
// have it wrong (a refused request, an answer's end), and its live answer followed on screen.
import { ApiError } from "./api.js";
import { shownOf } from "./message_list.js";
import * as msg from "./messages.js";
import { STATUS } from "./vocabulary.js";

/** A 404: the conversation (or message) is gone, deleted here or elsewhere. */
export const isGone = (error) => error instanceof ApiError && error.status === 404;

/**
 * @param {object} parts
 * @param {{messages: (id: number) => Promise<{results: object[]}>}} parts.api
 * @param {import("./live_answers.js").LiveAnswers} parts.live the answers being read
 * @param {object} parts.messageList the list on screen (message_list.js)
 * @param {HTMLElement} parts.list its element
 * @param {() => number | null} parts.shownId the conversation on screen
 * @param {(el: HTMLElement, generationId: number) => void} parts.watch follows an answer this page did not start
 * @param {() => void} parts.syncStreaming Send or Stop, as the conversation on screen now is
 * @param {(error: Error) => void} parts.failed says why a request failed
 * @param {(id: number) => void} parts.foundGone the conversation was found deleted
 */
export function createHistory({ api, live, messageList, list, shownId, watch, syncStreaming, failed, foundGone }) {
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

  function render(messages) {
    live.detachAll(); // their elements are about to go
    const shown = messageList.show(messages);
    followLiveAnswer(shown.at(-1));
    syncStreaming();
    messageList.scrollToBottom();
  }

  /** Shows the conversation as stored; false when it is gone (the caller calls foundGone). */
  async function reload(id, { orAsLastRead = false } = {}) {
    try {
      const { results } = await api.messages(id);
      if (id === shownId() && !live.get(id)) render(results);
    } catch (error) {
      if (isGone(error)) return false;
      failed(error);
      // Not reached: as last read, without what the page showed of the request not taken.
      if (orAsLastRead && id === shownId() && !live.get(id)) render(messageList.lastRead());
    }
    return true;
  }

  /** The ids the server gave the messages on screen; its history instead where they differ. */
  async function learnIds(id) {
    let results;
    try {
      ({ results } = await api.messages(id));
    } catch (error) {
      if (isGone(error) && !live.get(id)) foundGone(id); // deleted meanwhile
      return;
    }
    if (id !== shownId() || live.get(id)) return;
    const stored = shownOf(results);
    if (!messageList.learnIds(stored)) render(stored);
  }

  return { render, reload, learnIds };
}
