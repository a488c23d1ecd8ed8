// A conversation's title by the model lands a moment after its first answer (a background task
// asks the inference service): the page reads the conversation again a few times, each wait
// twice the last, and stops at the first title that differs from the one it shows. A model
// that gives no title leaves the first line, and the page stops reading after the last wait.
export const TITLE_CHECKS_MS = [1000, 2000, 4000, 8000];

const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * @param {object} how
 * @param {() => Promise<{title: string}>} how.read the conversation as the server has it now
 * @param {() => string | undefined} how.shown the title the page shows for it
 * @param {(conversation: object) => void} how.show shows a new title
 * @returns {Promise<boolean>} whether a new title was shown
 */
export async function watchTitle({ read, shown, show, delays = TITLE_CHECKS_MS, wait = pause }) {
  for (const delay of delays) {
    await wait(delay);
    let conversation;
    try {
      conversation = await read();
    } catch {
      return false; // deleted meanwhile, or signed out: there is no title left to show
    }
    if (conversation.title !== shown()) {
      show(conversation);
      return true;
    }
  }
  return false;
}
