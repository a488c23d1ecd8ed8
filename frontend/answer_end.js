// What the page does once an answer's stream has ended: the answer finished on screen and its
// ids learned, or a refusal said with the words given back and the conversation shown as stored;
// a Stop pressed before the server named the answer ends it on screen at once, the rest waiting
// for what the server makes of the request.
import { ENDING } from "./generation.js";
import * as msg from "./messages.js";

/**
 * @param {object} parts
 * @param {() => number | null} parts.shownId the conversation on screen
 * @param {() => object | null} parts.liveHere the answer being read on screen, if any
 * @param {object} parts.messageList the list on screen (message_list.js)
 * @param {object} parts.stored the open conversation as stored (history.js)
 * @param {object} parts.unsentWords words kept to give back (unsent_words.js)
 * @param {(error: Error, options?: object) => void} parts.handleError says why a request failed
 * @param {(id: number) => void} parts.foundGone the conversation was found deleted
 * @param {object} parts.sidebar the conversation list (sidebar.js)
 * @param {object} parts.heading the conversation's title (heading.js)
 */
export function createAnswerEnd({ shownId, liveHere, messageList, stored, unsentWords, handleError, foundGone,
  sidebar, heading }) {
  /**
   * Settles `outcome`, the run's of `generation` in conversation `id`, shown in `shownIn` (null:
   * read in the background); `stillSignedIn` false once another session began. Its final outcome.
   */
  return async function settle({ id, generation, outcome, shownIn, watching, words, stillSignedIn }) {
    const isStoppedBeforeStart = generation.stopped && !outcome.start;
    if (isStoppedBeforeStart) {
      // Stopped before the server named the answer: it ends on screen now, and what the server
      // makes of the request comes later (started, then stopped at nothing; or refused, and the
      // words go back). Until then the stored conversation may not hold the message yet.
      if (shownIn && id === shownId()) messageList.finish(shownIn, outcome, liveHere() !== null);
      outcome = await generation.ended;
      if (!stillSignedIn()) return outcome;
    }
    if (!shownIn || id !== shownId()) {
      if (outcome.ending === ENDING.REFUSED && !watching) {
        handleError(outcome.error, { elsewhere: id, isTextKept: unsentWords.keep(id, words) });
      }
    } else if (outcome.ending === ENDING.REFUSED && watching) {
      handleError(outcome.error); // no reload: it would show the same answer and try again
      msg.setState(shownIn, "Writing… (not followed live here: reload to see more)");
    } else if (outcome.ending === ENDING.REFUSED) {
      handleError(outcome.error);
      const isThere = await stored.reload(id, { orAsLastRead: true }); // as stored, without what was refused
      unsentWords.keep(id, words);
      if (!isThere) foundGone(id);
    } else {
      if (!isStoppedBeforeStart) messageList.finish(shownIn, outcome, liveHere() !== null);
      await stored.learnIds(id);
    }
    sidebar.refresh(); // a first message names the conversation and moves it to the top
    if (outcome.done?.title_requested) heading.watchModelTitle(id, { stillSignedIn });
    return outcome;
  };
}
