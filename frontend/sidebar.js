// The conversation list: newest first, searchable, with rename and delete on each item.
import { api } from "./api.js";
import { arrangeChildren } from "./child_order.js";
import { shownBelow } from "./conversation_pages.js";
import { isComposing } from "./keys.js";
import { limitCodePoints } from "./title_limit.js";

const UNTITLED = "New conversation";
// Drawn, not emoji: emoji fonts are missing on many systems and would show empty boxes.
const ICONS = {
  rename: '<svg viewBox="0 0 16 16" width="16" height="16" aria-hidden="true" focusable="false"><path d="M11 2l3 3-8 8H3v-3z" fill="none" stroke="currentColor" stroke-width="1.5" stroke-linejoin="round"/></svg>',
  delete: '<svg viewBox="0 0 16 16" width="16" height="16" aria-hidden="true" focusable="false"><path d="M3 4h10M6 4V2.5h4V4M4.5 4l.7 9.5h5.6l.7-9.5" fill="none" stroke="currentColor" stroke-width="1.5" stroke-linejoin="round"/></svg>',
};
const SEARCH_DELAY_MS = 250;

/** A conversation's icon button: `action` names its icon and its class (conversation-<action>);
 * showTitle names the button. */
function iconButton(action, onClick) {
  const button = document.createElement("button");
  button.type = "button";
  button.className = `conversation-${action} icon`;
  button.innerHTML = ICONS[action];
  button.addEventListener("click", onClick);
  return button;
}

/** Shows `title` on an item: its button, and the names of its Rename and Delete, which a screen
 * reader lists among every item's ("Rename", "Rename"… would not say which). */
function showTitle(li, title) {
  const shown = title || UNTITLED;
  li.querySelector(".conversation-open").textContent = shown;
  for (const [action, verb] of [["rename", "Rename"], ["delete", "Delete"]]) {
    const button = li.querySelector(`.conversation-${action}`);
    button.title = `${verb} “${shown}”`; // the tooltip too: a second, shorter one would be read after it
    button.setAttribute("aria-label", button.title);
  }
}

/**
 * @param {object} hooks
 * @param {(id: number) => void} hooks.open the user picked a conversation
 * @param {(id: number, elsewhere?: {elsewhere: boolean, name: string | null}) => void} hooks.deleted
 *   a conversation is gone: deleted here, or (`elsewhere`) in another tab, listed as `name` here
 * @param {(error: Error) => void} hooks.failed an API call failed
 * @param {(text: string) => void} hooks.announce tell screen readers
 */
export function createSidebar({ open, deleted, failed, announce }) {
  const list = document.getElementById("conversation-list");
  const search = document.getElementById("conversation-search");
  const more = document.getElementById("more-conversations");
  const empty = document.getElementById("conversation-empty");
  let current = null;
  let writing = new Set(); // ids of conversations whose answer this page is reading
  let query = "";
  let shownEnd = null; // the cursor of the last conversation shown (the API's `next`); null: the list's end
  let searchTimer = 0;
  let listRead = 0; // a newer read of the first page wins: a slow answer to an old search must not land
  let maxTitleChars = 0; // the server's, once known (setLimits); 0: the server alone says
  const listed = new Map(); // id -> {conversation, link, li} of the items shown

  /** The list's item for `conversation`: the one shown, updated in place, else a new one. */
  function itemFor(conversation) {
    const shown = listed.get(conversation.id);
    if (!shown) return item(conversation);
    Object.assign(shown.conversation, conversation); // rename and delete hold this object
    showTitle(shown.li, conversation.title);
    return shown.li;
  }

  function item(conversation) {
    const li = document.createElement("li");
    li.dataset.conversationId = String(conversation.id);
    const link = document.createElement("button");
    link.type = "button";
    link.className = "conversation-open";
  link.dir = "auto"; // a title in Hebrew or Arabic reads right to left
    link.addEventListener("click", () => open(conversation.id));
    listed.set(conversation.id, { conversation, link, li });
    const rename = iconButton("rename", () => startRename(li, conversation));
    const remove = iconButton("delete", () => removeConversation(li, conversation));
    const marker = document.createElement("span");
    marker.className = "conversation-writing";
    marker.textContent = "Writing…";
    li.append(link, marker, rename, remove);
    showTitle(li, conversation.title);
    markCurrent(li);
    markWriting(li);
    return li;
  }

  function markWriting(li) {
    const isWriting = writing.has(Number(li.dataset.conversationId));
    li.dataset.writing = String(isWriting);
    li.querySelector(".conversation-writing").hidden = !isWriting;
  }

  function markCurrent(li) {
    const open = li.querySelector(".conversation-open");
    if (li.dataset.conversationId === String(current)) open.setAttribute("aria-current", "true");
    else open.removeAttribute("aria-current");
  }

  function startRename(li, conversation) {
    const input = document.createElement("input");
    input.type = "text";
    input.className = "conversation-title-input";
    input.dir = "auto";
    input.value = conversation.title;
    limitCodePoints(input, () => maxTitleChars);
    input.setAttribute("aria-label", "Conversation title");
    const link = li.querySelector(".conversation-open");
    link.hidden = true;
    li.prepend(input);
    input.focus();
    input.select();
    let done = false;
    const finish = async (save) => {
      if (done) return;
      done = true;
      const title = input.value.trim();
      input.remove();
      link.hidden = false;
      link.focus();
      if (!save || title === conversation.title) return;
      try {
        const updated = await api.renameConversation(conversation.id, title);
        conversation.title = updated.title;
        showTitle(li, updated.title);
        announce(`Renamed to ${updated.title || UNTITLED}`);
        document.dispatchEvent(new CustomEvent("conversation-renamed", { detail: updated }));
      } catch (error) {
        failed(error);
      }
    };
    input.addEventListener("keydown", (event) => {
      if (isComposing(event)) return;
      if (event.key === "Enter") {
        event.preventDefault();
        finish(true);
      } else if (event.key === "Escape") {
        event.preventDefault();
        event.stopPropagation(); // Escape here cancels the rename, not a streaming answer
        finish(false);
      }
    });
    input.addEventListener("blur", () => finish(true));
  }

  async function removeConversation(li, conversation) {
    const name = conversation.title || UNTITLED;
    if (!window.confirm(`Delete “${name}”?`)) return;
    try {
      await api.deleteConversation(conversation.id);
    } catch (error) {
      failed(error);
      return;
    }
    drop(conversation.id, { isFocusKept: true });
    announce(`Deleted ${name}`);
    otherTabs?.postMessage({ deleted: conversation.id });
    deleted(conversation.id);
    load({ isBelowKept: true }); // one from below moves up onto the first page
  }

  /**
   * Takes a conversation out of the list; its name as listed (null: it was not). Keyboard users
   * stay in the list: the focus goes to the neighbour (else the search box), from the item
   * dropped or, with `isFocusKept`, from wherever it was.
   */
  function drop(id, { isFocusKept = false } = {}) {
    const shown = listed.get(id);
    if (!shown) return null;
    const { li, conversation } = shown;
    const neighbour = li.nextElementSibling || li.previousElementSibling;
    const isFocusHere = isFocusKept || li.contains(document.activeElement);
    li.remove();
    listed.delete(id);
    if (isFocusHere) (neighbour?.querySelector(".conversation-open") || search).focus();
    empty.hidden = list.children.length > 0;
    return conversation.title || UNTITLED;
  }

  // The other tabs of this browser drop a conversation deleted here at once: one listed on a page
  // below the first, which only the first is read again after an answer, would stay there.
  const otherTabs = typeof BroadcastChannel === "function" ? new BroadcastChannel("chatapp.conversations") : null;
  otherTabs?.addEventListener("message", ({ data }) => {
    if (!Number.isInteger(data?.deleted)) return;
    const name = drop(data.deleted);
    deleted(data.deleted, { elsewhere: true, name });
  });

  /**
   * The list's first page read again (a new search: alone; with `isBelowKept`, those shown below
   * it stay: conversation_pages.js), or with `append` (Show older) the conversations after the
   * last one shown. Show older asks for those after that one's place in the list (a cursor),
   * not for a page by its number: a conversation deleted or moved up elsewhere shifts numbered
   * pages, and the next would skip one or list one again.
   */
  async function load({ append = false, isBelowKept = false } = {}) {
    // Show older's read lands while the list still ends where it read on from, for the same
    // search: a read of the first page begun meanwhile (an answer's end) leaves that end as it
    // was unless the pages below are folded back.
    const mine = append ? null : ++listRead;
    const from = shownEnd;
    const asked = query;
    const isCurrent = () => (append ? shownEnd === from && query === asked : mine === listRead);
    try {
      const result = await api.conversations(query, append ? from : null);
      if (!isCurrent()) return;
      // The open conversation may have been named by its first message: let the page know.
      document.dispatchEvent(new CustomEvent("conversations-loaded", { detail: result.results }));
      // Items already shown are kept, not rebuilt: a click or a rename begun on one before the
      // answer came goes on (a rebuilt item would take the mouse's release, or drop the rename).
      const focused = list.contains(document.activeElement);
      const moreFocused = document.activeElement === more;
      const unseen = result.results.filter((c) => !listed.has(c.id));
      if (append) {
        arrangeChildren(list, [...list.children, ...unseen.map(item)]);
        shownEnd = result.next;
      } else {
        const shown = [...list.children].map((li) => listed.get(Number(li.dataset.conversationId)).conversation);
        const below = isBelowKept ? shownBelow(shown, result) : [];
        if (!below.length) shownEnd = result.next;
        const ids = new Set([...result.results.map((c) => c.id), ...below]);
        const items = [...result.results.map(itemFor), ...below.map((id) => listed.get(id).li)];
        for (const id of [...listed.keys()]) if (!ids.has(id)) listed.delete(id);
        arrangeChildren(list, items);
      }
      // Show older, pressed from the keyboard, may hide itself: the focus goes to what it showed.
      if (append && moreFocused && unseen.length && shownEnd === null) {
        listed.get(unseen[0].id).link.focus();
      }
      if (focused && !list.contains(document.activeElement)) search.focus(); // its item is gone
      more.hidden = shownEnd === null;
      empty.hidden = list.children.length > 0;
      empty.textContent = query ? "No conversation matches." : "No conversations yet.";
    } catch (error) {
      if (isCurrent()) failed(error);
    }
  }

  search.addEventListener("input", () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => {
      query = search.value.trim();
      load();
    }, SEARCH_DELAY_MS);
  });
  search.addEventListener("keydown", (event) => {
    if (event.key === "Enter") {
      event.preventDefault();
      clearTimeout(searchTimer);
      query = search.value.trim();
      load();
    }
  });
  more.addEventListener("click", () => load({ append: true }));

  // On a phone the list is a drawer over the chat, opened from the top bar. Open, what lies under
  // it is inert: Tab stays in the drawer, not on controls it hides, until Close or Escape.
  const toggle = document.getElementById("toggle-sidebar");
  const under = [".skip-link", ".topbar", "main"].map((selector) => document.querySelector(selector));
  function setDrawer(open) {
    document.body.classList.toggle("sidebar-open", open);
    toggle.setAttribute("aria-expanded", String(open));
    for (const el of under) el.inert = open;
  }
  function closeDrawer({ focusToggle = false } = {}) {
    if (!document.body.classList.contains("sidebar-open")) return;
    setDrawer(false);
    if (focusToggle) toggle.focus();
  }
  toggle.addEventListener("click", () => {
    const open = !document.body.classList.contains("sidebar-open");
    setDrawer(open);
    if (open) search.focus();
  });
  document.getElementById("close-sidebar").addEventListener("click", () => closeDrawer({ focusToggle: true }));
  // What shows of the chat beside the drawer is inert, so a tap there did nothing: it closes the
  // drawer instead, as a tap beside a drawer does elsewhere.
  document.addEventListener("click", (event) => {
    if (!event.target.closest("#sidebar, #toggle-sidebar")) closeDrawer({ focusToggle: true });
  });
  // Wide enough, the list stands beside the chat: no drawer, nothing inert.
  matchMedia("not all and (max-width: 45em)").addEventListener("change", (event) => { if (event.matches) closeDrawer(); });

  return {
    closeDrawer,
    /** The server's limits (GET /api/auth/session): a title's length, in code points. */
    setLimits(limits) {
      maxTitleChars = Number(limits?.max_title_chars) || 0;
    },
    refresh: () => load({ isBelowKept: true }),
    setCurrent(id) {
      current = id;
      for (const li of list.children) markCurrent(li);
    },
    /** Marks the conversations whose answer is being written (`ids`, a Set of numbers). */
    setWriting(ids) {
      writing = ids;
      for (const li of list.children) markWriting(li);
    },
    /** Takes a conversation found deleted out of the list: its name as listed, null if it was not. */
    drop: (id) => drop(id),
    /** The title shown for a conversation; undefined when it is not in the list. */
    titleOf: (id) => listed.get(id)?.conversation.title,
    /** The name the list shows for a conversation; null when it is not in the list. */
    nameOf: (id) => (listed.has(id) ? listed.get(id).conversation.title || UNTITLED : null),
    /** Shows a conversation's new title in place (the model named it): nothing else is redrawn. */
    setTitle(updated) {
      const shown = listed.get(updated.id);
      if (!shown) return;
      shown.conversation.title = updated.title;
      showTitle(shown.li, updated.title);
    },
    /** Signed out: nothing of this user's list outlives it, the cursor of its last either. */
    clear() {
      listRead += 1; // a read still on its way lands nowhere (Show older's: the list's end is gone)
      listed.clear();
      list.replaceChildren();
      search.value = "";
      query = "";
      shownEnd = null;
    },
  };
}
