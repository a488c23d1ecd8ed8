// The open conversation's heading: its title, which follows a rename in the list, the list's
// reloads, and the title the model gives the conversation after its first answer.
import { watchTitle } from "./title_watch.js";

const UNTITLED = "New conversation";

/**
 * @param {object} parts
 * @param {HTMLElement} parts.el the heading
 * @param {() => number | null} parts.openId the conversation on screen (null: a new one)
 * @param {object} parts.sidebar the conversation list, whose titles change with the heading's
 * @param {(id: number) => Promise<object>} parts.read the conversation as the server has it now
 */
export function createHeading({ el, openId, sidebar, read }) {
  const show = (conversation) => {
    if (conversation.id === openId()) el.textContent = conversation.title || UNTITLED;
  };
  document.addEventListener("conversation-renamed", ({ detail }) => show(detail));
  document.addEventListener("conversations-loaded", ({ detail }) => detail.forEach(show));

  return {
    set(id, title) {
      el.textContent = id === null ? UNTITLED : title || UNTITLED;
    },

    /** The model is naming conversation `id`: its title in the list and the heading follow. */
    watchModelTitle(id, { stillSignedIn }) {
      watchTitle({
        read: () => read(id),
        shown: () => sidebar.titleOf(id) ?? (id === openId() ? el.textContent : undefined),
        show: (conversation) => {
          if (!stillSignedIn()) return; // signed out and in again meanwhile
          sidebar.setTitle(conversation);
          show(conversation);
        },
      });
    },
  };
}
