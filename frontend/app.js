// Wiring: signing in, the open conversation, the composer, and the answers being read: at most
// one per conversation, followed in the background when the user opens another.
import { api, ApiError } from "./api.js";
import { createAccountMenu } from "./account_menu.js";
import { createAnswerEnd } from "./answer_end.js";
import { createAuth } from "./auth.js";
import { createComposer } from "./composer.js";
import { createConversationSettings } from "./conversation_settings.js";
import { NO_SUCH_CONVERSATION, sentenceElsewhere, sentenceFor, sentenceForGone } from "./errors.js";
import { Generation } from "./generation.js";
import { createHeading } from "./heading.js";
import { createHistory, isGone } from "./history.js";
import { keepPiecesAsThePageGoes } from "./kept_pieces.js";
import { onEscape } from "./keys.js";
import { LiveAnswers } from "./live_answers.js";
import { createMessageList } from "./message_list.js";
import { historyOf, NO_HISTORY } from "./message_pages.js";
import { hasText } from "./message_text.js";
import * as msg from "./messages.js";
import { createNotices } from "./notices.js";
import { readingPlace, view } from "./page_view.js";
import { createPasswordChange } from "./password_change.js";
import { createFramePainter } from "./render.js";
import { createSendStop } from "./send_stop.js";
import { ROUTE, routeOf, showInAddress } from "./route.js";
import { createSidebar } from "./sidebar.js";
import { createUnsentWords } from "./unsent_words.js";
import { STATUS } from "./vocabulary.js";

// For end-to-end tests and the browser benchmark: paints per streamed answer (to compare with
// animation frames) and how long the final Markdown render of the last answer took.
window.chatappStats = { paints: 0, finalRenderMs: null };
document.body.dataset.streaming = "false";

let conversationId = null;
const live = new LiveAnswers(); // the answers being read, in this conversation or others
const liveHere = () => live.get(conversationId);
let loading = 0; // newer conversation loads win over older ones
let session = 0; // counts sign-ins and sign-outs: an answer that ends after one touches no page
let creating = false; // a conversation is being created (a first message's, or New's): one at a time
let opening = null; // the conversation being loaded, if any
let isSignedIn = false;

const { announce, showAlert, clearAlert } = createNotices({
  announcer: view.announcer, alert: view.alert, alertText: view.alertText, dismiss: view.dismiss,
  dismissed: () => view.composer.focus(),
});

const sidebar = createSidebar({
  open: (id) => openConversation(id),
  deleted: (id, { elsewhere = false, name = null } = {}) => {
    live.get(id)?.generation.close(); // the server stopped its answer with it: no Stop to send
    const isShown = id === conversationId;
    // The words being written, and those kept for it, go to a new conversation (else lost).
    if (isShown) showConversation(null, "", NO_HISTORY, null, { composerStays: true });
    unsentWords.gone(id);
    if (isShown && elsewhere) showAlert(sentenceForGone(name));
  },
  failed: (error) => handleError(error),
  announce,
});
live.onChange((ids) => sidebar.setWriting(ids));
// A page going mid-answer hands back what the server may lack of it (kept_pieces.js).
const keptPieces = keepPiecesAsThePageGoes({ recover: api.recover, atRisk: () => live.piecesAtRisk() });

/** Says why a request failed; `elsewhere`: the conversation it was of, if not the one on screen. */
function handleError(error, { elsewhere = null, isTextKept = false } = {}) {
  if (error instanceof ApiError && error.status === 401) return auth.showLogin(sentenceFor(error));
  const sentence = sentenceFor(error, { maxMessageChars: characterLimit.maxMessageChars });
  showAlert(elsewhere === null ? sentence : sentenceElsewhere(sidebar.nameOf(elsewhere), sentence, isTextKept));
}

const messageList = createMessageList({ list: view.messages, empty: view.empty, announce });
const stored = createHistory({ // the open conversation as the server has it
  api, live, messageList, list: view.messages, earlier: view.earlier, announce, shownId: () => conversationId,
  watch: (el, generationId) => watchAnswer(el, generationId), syncStreaming: () => syncStreaming(),
  failed: (error) => handleError(error), foundGone: (id) => foundGone(id),
  olderShown: () => unsentWords.giveBack(), // a rewrite of an older message waits for it
});
const heading = createHeading({
  el: view.title, openId: () => conversationId, sidebar, read: (id) => api.conversation(id),
});

const conversationSettings = createConversationSettings({ api, failed: (error) => handleError(error), announce });
const accountMenu = createAccountMenu();
const passwordChange = createPasswordChange({ api, failed: (error) => handleError(error), announce });

const { limit: characterLimit, setText: setComposerText } = createComposer({
  composer: view.composer, form: view.form, counter: view.count, send: view.send, announce,
  isBusy: () => document.body.dataset.streaming === "true", submit: () => send(),
});

// A refused request stores nothing (the model's refusal leaves its audit row alone): what the
// user wrote in it exists only here until it is back where it was written.
const unsentWords = createUnsentWords({
  shownId: () => conversationId,
  findMessage: (id) => view.messages.querySelector(`.message[data-role="user"][data-message-id="${id}"]`),
  edit: (el, text) => startEdit(el, text), fillComposer: (text) => setComposerText(text),
  page: window, composerText: () => view.composer.value, // kept as the page goes
  rewrites: () => msg.openRewrites(view.messages), // and the message editors' words
  hasOlder: () => stored.hasOlder(),
});
const settle = createAnswerEnd({ // what the page does once an answer's stream has ended
  shownId: () => conversationId, liveHere, messageList, stored, unsentWords, handleError, foundGone, sidebar, heading,
});

// --- signing in ---
const auth = createAuth({
  signedIn(user) {
    isSignedIn = true;
    session += 1;
    unsentWords.signedIn(user.username);
    sidebar.refresh();
    conversationSettings.load();
    keptPieces.handBack();
    const { kind } = routeOf(location.hash);
    if (kind === ROUTE.NEW || kind === ROUTE.OTHER) showConversation(null);
    else followAddress();
    view.composer.focus();
  },
  limitsKnown: (limits) => {
    characterLimit.setLimits(limits);
    sidebar.setLimits(limits);
  },
  leaving({ signingOut = false } = {}) {
    unsentWords.leaving(); // kept for the same user's next sign-in
    passwordChange.leaving();
    accountMenu.close();
    isSignedIn = false;
    session += 1;
    const left = live.leaveAll(api.stop);
    sidebar.clear();
    // Before anyone signed in nothing is open: keep a bookmarked address for after sign-in.
    if (conversationId !== null || opening !== null) showConversation(null);
    loading += 1; // a conversation still loading must not land on the sign-in form
    opening = null;
    // Kept for the next sign-in through a session that ended or a server not reached; not past a sign-out.
    if (signingOut) for (const kept of [unsentWords, keptPieces]) kept.clear();
    clearAlert();
    return left;
  },
});

// --- the open conversation ---
/** Shows a conversation, `history` what was read of it (message_pages.js). */
function showConversation(id, title = "", history = NO_HISTORY, conversation = null, { composerStays = false } = {}) {
  if (!composerStays) unsentWords.opening(id);
  conversationId = id;
  conversationSettings.show(id === null ? null : conversation);
  sidebar.setCurrent(id);
  showInAddress(id, { replace: id === null });
  heading.set(id, title);
  stored.render(history);
  unsentWords.giveBack();
}

async function openConversation(id) {
  clearAlert();
  // Picked in the drawer, which hides: its button holds the focus until the conversation takes it.
  sidebar.closeDrawer({ focusToggle: true });
  const mine = ++loading;
  opening = id;
  try {
    const page = await api.messages(id); // its newest messages: older ones as the reader scrolls up
    if (mine !== loading) return;
    const { conversation } = page;
    showConversation(conversation.id, conversation.title, historyOf(page), conversation);
    readingPlace().focus();
  } catch (error) {
    if (mine !== loading) return;
    if (!isGone(error)) {
      // Not reached (offline), or a server error: the conversation on screen stays, and so does
      // what is being written in it; the address names it again (Back may have changed it).
      showInAddress(conversationId, { replace: true });
      return handleError(error);
    }
    showConversation(null);
    unsentWords.gone(id); // deleted elsewhere: words kept for it go to a new conversation
    showAlert(sentenceForGone(sidebar.drop(id))); // another account's answers 404 too, the same
  } finally {
    if (mine === loading) opening = null;
  }
}

/** Opens what the address names: after Back, Forward, or an edited or bookmarked address. */
function followAddress() {
  const route = routeOf(location.hash);
  if (!isSignedIn || route.kind === ROUTE.OTHER) return;
  if (route.kind === ROUTE.CONVERSATION) {
    if (route.id !== (opening ?? conversationId)) openConversation(route.id);
  } else if (conversationId !== null || opening !== null) {
    // An answer being written goes on in the background (Stop is the only way to stop it).
    loading += 1; // a conversation still loading must not land over this one
    opening = null;
    clearAlert();
    showConversation(null);
    if (route.kind === ROUTE.UNKNOWN) showAlert(NO_SUCH_CONVERSATION);
  } else if (route.kind === ROUTE.UNKNOWN) {
    showInAddress(null, { replace: true });
    showAlert(NO_SUCH_CONVERSATION);
  }
}
// Both fire for one step back or an edited hash; followAddress acts once.
for (const type of ["popstate", "hashchange"]) window.addEventListener(type, followAddress);

/**
 * The conversation on screen, `id`, was found deleted (in another tab or device): a new
 * conversation takes its place, with the words written for it, rather than one that refuses
 * every message. Elsewhere by now, its words wait for a new conversation.
 */
function foundGone(id) {
  const isShown = id === conversationId;
  if (isShown) showConversation(null, "", NO_HISTORY, null, { composerStays: true });
  unsentWords.gone(id);
  const name = sidebar.drop(id);
  if (isShown) showAlert(sentenceForGone(name));
}

/** A new conversation with the settings chosen for it; null when refused (the page says why).
 * One at a time: `creating` holds while it is on its way. */
async function createConversation() {
  creating = true;
  try {
    return await api.createConversation(conversationSettings.forNewConversation());
  } catch (error) {
    handleError(error);
    return null;
  } finally {
    creating = false;
  }
}

view.newConversation.addEventListener("click", async () => {
  clearAlert();
  sidebar.closeDrawer({ focusToggle: true });
  // An empty conversation is already new: do not pile up untitled ones.
  if (conversationId !== null && !view.messages.children.length && !liveHere()) return view.composer.focus();
  // A double click, or a first message's conversation on its way: one.
  const created = creating ? null : await createConversation();
  if (created === null) return;
  // From the blank page, which was a new conversation already, what is being written goes along.
  showConversation(created.id, created.title, NO_HISTORY, created, { composerStays: conversationId === null });
  await sidebar.refresh();
  view.composer.focus();
});

// --- streaming ---
/** Send or Stop, for the conversation on screen. */
const syncStreaming = () => setStreaming(liveHere() !== null);

const setStreaming = createSendStop({
  send: view.send, stop: view.stop, readingPlace, isOverLimit: () => characterLimit.isOver(),
  refreshActions: (on) => msg.refreshActions(view.messages, on),
});

// Answers written in conversations not on screen (begun before a reload, or in another tab) are
// followed in the background: unread, the server would end them as interrupted.
document.addEventListener("conversations-loaded", ({ detail }) => detail.forEach(({ id, live_generation_id: gid }) => {
  if (!gid || !isSignedIn || id === conversationId || live.get(id)) return;
  streamAnswer(null, api.watch(gid), { watching: true, conversation: id });
}));

/** Follows an answer this page did not start (another tab's, or one from before a reload). */
function watchAnswer(el, generationId) {
  el.dataset.watched = "true";
  return streamAnswer(el, api.watch(generationId), { watching: true });
}

/** Reads an answer into `el` (null: read in the background) to its end. `words`: what the user
 * wrote that this request carries, `{text, editOf}` as unsent_words.js holds them, given back if
 * the server refuses it. */
async function streamAnswer(el, open, {
  baseText = "", watching = false, words = null, conversation = conversationId } = {}) {
  const id = conversation;
  const mySession = session;
  const stillSignedIn = () => mySession === session; // no sign-out (and in again) meanwhile
  if (!watching) clearAlert(); // a watch begun by a reload must not hide why it was reloaded
  if (el) msg.beginStreaming(el);
  messageList.scrollToBottom();
  let entry = null;
  const generation = new Generation({
    baseText,
    createPainter: (paint) => createFramePainter(paint),
    paint: (text) => {
      if (entry.el) messageList.paint(entry.el, text); // else not on screen: read on, paint nothing
    },
    onStart: (start) => {
      conversationSettings.used(start.model);
      // A first message has named the conversation by now (its rows are written before the
      // stream starts): the list and the heading take that name while the answer is written.
      if (!sidebar.titleOf(id)) sidebar.refresh();
      if (!entry.el) return;
      entry.el.dataset.messageId = String(start.message_id);
      // An answer's own stream says it; a watch stream's prefix does not (the history did).
      if (id === conversationId && "context_from_message_id" in start) {
        msg.markContextStart(view.messages, start.context_from_message_id);
      }
    },
    resume: api.resume, recover: api.recover, // a lost stream again; what the server lost of it
    // A lost connection is not an error yet: the answer goes on at the server while it is away.
    onReconnecting: (on) => {
      if (entry.el) messageList.setReconnecting(entry.el, on);
    },
  });
  entry = live.add(id, generation, el);
  entry.watching = watching;
  syncStreaming();
  // A new answer asks the server once one stopped here has ended there (else: 409).
  const opened = watching ? open : (signal) => live.stopEnded(id).then(() => open(signal));
  const outcome = await generation.run(opened);
  const shownIn = entry.el; // null when the user is elsewhere: the server keeps the answer
  live.remove(entry);
  if (mySession !== session) return outcome;
  // This browser's session ended (signed out elsewhere, or its password changed in another
  // browser): the server sent no more of the answer, and only a sign-in shows it again.
  if (outcome.error?.code === "signed_out") {
    auth.showLogin(sentenceFor(outcome.error));
    return outcome;
  }
  if (id === conversationId) syncStreaming();
  return settle({ id, generation, outcome, shownIn, watching, words, stillSignedIn });
}

async function send() {
  const content = view.composer.value;
  if (!hasText(content) || liveHere() || creating || characterLimit.isOver()) return;
  if (conversationId === null) {
    const created = await createConversation();
    if (created === null) return;
    showConversation(created.id, created.title, NO_HISTORY, created, { composerStays: true });
    sidebar.refresh(); // listed at once, so that it can be marked as writing if the user leaves it
  }
  // Only what was sent leaves the composer: what was typed while the conversation was being
  // created stays (and all of it, should the sent text itself have been changed meanwhile).
  const typed = view.composer.value;
  setComposerText(typed.startsWith(content) ? typed.slice(content.length).trimStart() : typed);
  view.messages.append(msg.createMessage({ role: "user", content }));
  streamAnswer(messageList.newAnswer(), api.send(conversationId, content), { words: { text: content, editOf: null } });
}

function regenerate() {
  const last = view.messages.lastElementChild;
  if (liveHere() || conversationId === null || last?.dataset.role !== "assistant") return;
  const shownLast = stored.shownLast(); // what a page that missed a change would destroy (history.js)
  const answer = msg.createMessage({ role: "assistant", status: STATUS.STREAMING });
  last.replaceWith(answer);
  streamAnswer(answer, api.regenerate(conversationId, shownLast));
}

/** Opens the editor of a user message, with `text`; false when it cannot now (an answer is written). */
function startEdit(userEl, text = msg.textOf(userEl)) {
  if (liveHere()) return false;
  return msg.openEditor(userEl, text, (content) => {
    if (liveHere()) return;
    const shownLast = stored.shownLast();
    msg.setText(userEl, content);
    while (userEl.nextElementSibling) userEl.nextElementSibling.remove();
    const editOf = userEl.dataset.messageId;
    streamAnswer(messageList.newAnswer(), api.edit(editOf, content, shownLast), { words: { text: content, editOf } });
  }, { limits: { max_message_chars: characterLimit.maxMessageChars }, announce });
}

messageList.onControl({
  edit: (el) => startEdit(el),
  reopen: () => openConversation(conversationId),
  regenerate,
  continueAnswer: (el) => {
    if (!liveHere()) streamAnswer(el, api.continueAnswer(el.dataset.messageId), { baseText: msg.textOf(el) });
  },
});

// --- keys ---
/** A Stop of the answer on screen. One refused, the answer having ended otherwise (docs/api.md),
 * leaves the record as it is: the conversation is read again to show that, not what was assumed.
 * One refused for a session that ended elsewhere shows the sign-in form (once: it is sent again
 * meanwhile, and reaches the answer once signed in). */
function stopHere() {
  const id = conversationId;
  liveHere()?.generation.stop((gid, seen) => api.stop(gid, seen).catch((error) => {
    if (error instanceof ApiError && error.status === 409 && id === conversationId) {
      stored.reload(id).then((isThere) => isThere || foundGone(id));
    }
    if (error instanceof ApiError && error.status === 401 && isSignedIn) handleError(error);
    throw error;
  }));
}
view.stop.addEventListener("click", stopHere);

onEscape({
  composer: view.composer, canStop: () => liveHere() !== null, stop: stopHere,
  otherwise: () => sidebar.closeDrawer({ focusToggle: true }),
});

auth.start();
