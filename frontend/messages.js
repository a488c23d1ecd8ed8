// The message list's DOM: one <article class="message"> per message, its state line, its
// quiet meta line (TTFT, tokens) and its buttons, shown or hidden by refreshActions().
import { createCharacterLimit } from "./character_limit.js";
import { isComposing } from "./keys.js";
import { answerLabel, offersRetry } from "./labels.js";
import { hasText } from "./message_text.js";
import { showMarkdown } from "./render.js";
import { STATUS } from "./vocabulary.js";

const texts = new WeakMap(); // element -> the message's raw text (what Copy copies)

function button(className, text, label) {
  const el = document.createElement("button");
  el.type = "button";
  el.className = className;
  el.textContent = text;
  if (label) el.setAttribute("aria-label", label);
  return el;
}

/** A new message element; `message` has the API's shape (id may be null for a fresh one). */
export function createMessage({ id = null, role, status = STATUS.COMPLETED, content = "" }) {
  const el = document.createElement("article");
  el.className = "message";
  el.dataset.role = role;
  el.dataset.status = status;
  el.dataset.messageId = id === null ? "" : String(id);
  name(el);

  const body = document.createElement("div");
  body.className = "message-content";
  body.dir = "auto"; // Hebrew or Arabic reads right to left, its punctuation at its end
  const state = document.createElement("p");
  state.className = "message-state";
  const meta = document.createElement("p");
  meta.className = "message-meta";
  const actions = document.createElement("div");
  actions.className = "message-actions";
  if (role === "user") {
    actions.append(button("edit", "Edit", "Edit message"));
  } else {
    actions.append(
      button("copy-answer", "Copy", "Copy answer"),
      button("regenerate", "Regenerate", "Regenerate answer"),
      button("continue", "Continue", "Continue answer"),
      button("retry", "Retry", "Retry answer"),
    );
  }
  el.append(body, state, meta, actions);
  setText(el, content);
  return el;
}

/** What a screen reader calls the message: an answer still being written says so. */
function name(el) {
  const { role, status } = el.dataset;
  const said = status === STATUS.STREAMING ? "Assistant is answering" : "Assistant answered";
  el.setAttribute("aria-label", role === "user" ? "You said" : said);
}

export const textOf = (el) => texts.get(el) ?? "";
export const contentOf = (el) => el.querySelector(".message-content");

/** Final text: Markdown for answers (rendered once, here), plain text for what the user typed. */
export function setText(el, text) {
  texts.set(el, text);
  const body = contentOf(el);
  if (el.dataset.role === "assistant" && el.dataset.status !== STATUS.STREAMING) {
    body.classList.add("markdown");
    showMarkdown(body, text);
  } else {
    body.classList.remove("markdown");
    body.textContent = text;
  }
}

/** Streaming: plain text only, and the region asks screen readers to wait for the end. */
export function beginStreaming(el) {
  el.dataset.status = STATUS.STREAMING;
  name(el);
  delete el.dataset.error;
  delete el.dataset.cancelledBy;
  const body = contentOf(el);
  body.classList.remove("markdown");
  body.textContent = textOf(el);
  body.setAttribute("aria-live", "polite");
  body.setAttribute("aria-busy", "true");
  setState(el, answerLabel({ status: STATUS.STREAMING }));
  setMeta(el, null);
}

export function paintStreaming(el, text) {
  contentOf(el).textContent = text;
}

export function setState(el, text) {
  const state = el.querySelector(".message-state");
  state.textContent = text || "";
  state.hidden = !text;
}


/** The quiet figures: time to first token and tokens generated. */
export function setMeta(el, figures) {
  const parts = [];
  if (figures?.ttftMs !== null && figures?.ttftMs !== undefined) parts.push(`TTFT ${Math.round(figures.ttftMs)} ms`);
  if (figures?.tokens !== null && figures?.tokens !== undefined) parts.push(`${figures.tokens} tokens`);
  const meta = el.querySelector(".message-meta");
  meta.textContent = parts.join(" · ");
  meta.hidden = parts.length === 0;
}

/** Ends an answer: status, who cancelled it, text rendered once, state line, figures. */
export function finishMessage(el, { status, cancelledBy = "", text, state, error, figures }) {
  el.dataset.status = status;
  name(el);
  setCancelledBy(el, cancelledBy);
  if (error) el.dataset.error = error;
  else delete el.dataset.error;
  setText(el, text);
  // Still live from streaming: no longer busy, so screen readers read the final answer once.
  if (contentOf(el).hasAttribute("aria-busy")) contentOf(el).setAttribute("aria-busy", "false");
  setState(el, state ?? answerLabel({ status, cancelledBy }));
  setMeta(el, figures);
}

function setCancelledBy(el, cancelledBy) {
  if (cancelledBy) el.dataset.cancelledBy = cancelledBy;
  else delete el.dataset.cancelledBy;
}

/**
 * The stored record of a settled answer, where it tells more than the stream did: who stopped
 * it, and the text a Stop from another tab cut it to.
 */
export function settleFromApi(el, message) {
  const cancelledBy = message.generation?.cancelled_by || "";
  // The page saw more (a lost connection), it is live, or the server has yet to write the end.
  if (el.dataset.error || el.dataset.status === STATUS.STREAMING || message.status === STATUS.STREAMING) return;
  if (el.dataset.status !== message.status || (el.dataset.cancelledBy || "") !== cancelledBy) {
    el.dataset.status = message.status;
    setCancelledBy(el, cancelledBy);
    setState(el, answerLabel({ status: message.status, cancelledBy, generationStatus: message.generation?.status }));
  }
  if (textOf(el) !== message.content) setText(el, message.content);
}

/** A message from GET .../messages. */
export function messageFromApi(message) {
  const el = createMessage(message);
  if (message.role === "assistant") {
    const cancelledBy = message.generation?.cancelled_by || "";
    setCancelledBy(el, cancelledBy);
    if (message.generation) el.dataset.generationId = String(message.generation.id);
    setState(el, answerLabel({ status: message.status, cancelledBy, generationStatus: message.generation?.status }));
    setMeta(el, message.generation && {
      ttftMs: message.generation.ttft_ms,
      tokens: message.generation.output_tokens,
    });
  } else {
    setState(el, "");
    setMeta(el, null);
  }
  return el;
}

export const CONTEXT_NOTE = "Earlier messages are beyond what the model can read";

/**
 * A quiet line above the first message the model read, when older ones were left out to fit its
 * context; `messageId` null or undefined: it read them all. A question just sent has no id yet:
 * it is the one the line goes above until the ids are learned.
 */
export function markContextStart(container, messageId) {
  container.querySelector(".context-marker")?.remove();
  // Kept: that message may be in an older page, drawn later (message_list.js prepend).
  container.dataset.contextFrom = messageId ?? "";
  if (messageId === null || messageId === undefined) return;
  const shown = [...container.querySelectorAll(".message")];
  const first = shown.find((el) => el.dataset.messageId === String(messageId))
    ?? shown.findLast((el) => el.dataset.role === "user" && el.dataset.messageId === "");
  if (!first) return;
  const marker = document.createElement("p");
  marker.className = "context-marker";
  marker.setAttribute("role", "note");
  marker.dataset.messageId = String(messageId);
  marker.textContent = CONTEXT_NOTE;
  first.before(marker);
}

/** Where the conversation's latest answer read from, as the stored messages say. */
export const contextStartOf = (messages) =>
  messages.findLast((m) => m.role === "assistant" && m.generation)?.generation.context_from_message_id ?? null;

/** Which buttons each message offers, given its place and whether an answer is streaming. */
export function refreshActions(container, streaming) {
  const all = [...container.querySelectorAll(".message")];
  const last = all.at(-1);
  for (const el of all) {
    const isLast = el === last;
    const status = el.dataset.status;
    const show = (selector, visible) => {
      const control = el.querySelector(selector);
      if (!control) return;
      control.hidden = !visible;
      control.disabled = streaming;
    };
    if (el.dataset.role === "user") {
      show(".edit", el.dataset.messageId !== "");
      // An editor opened before the answer began stays open, its Send off as the composer's is
      // (and past the character limit: character_limit.js marks the text invalid).
      const save = el.querySelector(".edit-save");
      if (save) save.disabled = streaming || el.querySelector(".edit-input").getAttribute("aria-invalid") === "true";
      continue;
    }
    const settled = status !== STATUS.STREAMING;
    const broken = offersRetry({ status, cancelledBy: el.dataset.cancelledBy || "" });
    show(".copy-answer", settled && textOf(el) !== "");
    show(".regenerate", isLast && settled && !broken);
    show(".retry", isLast && broken);
    show(".continue", isLast && status === STATUS.TRUNCATED && el.dataset.messageId !== "");
    el.querySelector(".copy-answer").disabled = false;
  }
}

/** The rewrites under way in the open editors of `list`'s messages, where they changed the text. */
export function openRewrites(list) {
  const rewrites = [];
  for (const el of list.querySelectorAll('.message.editing[data-role="user"][data-message-id]')) {
    const text = el.querySelector(".edit-input")?.value ?? "";
    if (hasText(text) && text !== textOf(el)) rewrites.push({ text, editOf: el.dataset.messageId });
  }
  return rewrites;
}

/**
 * Edits a user message in place, starting from `text`, and hands the new text to `submit`;
 * Escape or Cancel puts things back and returns focus to the Edit button. False when an editor
 * is open on it already (its text stays). `limits` (the server's) are shown as the composer's
 * are: a counter near the limit, Send off beyond it; `announce` tells screen readers.
 */
export function openEditor(userEl, text, submit, { limits = null, announce = () => {} } = {}) {
  if (userEl.querySelector(".edit-form")) return false;
  const form = document.createElement("form");
  form.className = "edit-form";
  const input = document.createElement("textarea");
  input.className = "edit-input";
  input.dir = "auto";
  input.setAttribute("aria-label", "Edit message");
  input.value = text;
  const buttons = document.createElement("div");
  buttons.className = "edit-buttons";
  const save = button("edit-save", "Send");
  save.type = "submit";
  const cancel = button("edit-cancel", "Cancel");
  const counter = document.createElement("span");
  counter.className = "composer-count edit-count";
  counter.id = `edit-count-${userEl.dataset.messageId}`;
  counter.hidden = true;
  input.setAttribute("aria-describedby", counter.id);
  buttons.append(counter, save, cancel);
  form.append(input, buttons);
  createCharacterLimit({
    composer: input, counter, send: save, announce, isBusy: () => document.body.dataset.streaming === "true",
  }).setLimits(limits);
  userEl.classList.add("editing");
  contentOf(userEl).after(form);
  input.focus();
  const close = () => {
    form.remove();
    userEl.classList.remove("editing");
  };
  cancel.addEventListener("click", () => {
    close();
    userEl.querySelector(".edit").focus();
  });
  input.addEventListener("keydown", (event) => {
    if (isComposing(event)) return;
    if (event.key === "Escape") {
      event.stopPropagation(); // Escape closes the editor; it is not a Stop
      cancel.click();
    } else if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      form.requestSubmit();
    }
  });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (!hasText(input.value) || save.disabled) return; // off: an answer is being written; the words stay
    close(); // first, so the focus it held can move to Stop
    submit(input.value);
  });
  return true;
}
