// What a failure means to the person using the page, in a sentence. The API's codes (docs/api.md)
// and its messages are written for developers; they stay in the audit row and in the message's
// data-error attribute, and are never shown.

const TRY_AGAIN = "Please try again.";
const MODEL_BUSY = "The model is busy right now. Please try again in a moment.";
const MODEL_UNREACHABLE = "The model can't be reached right now. Please try again in a moment.";
const PAGE_OUTDATED = "The page sent something the server could not read. Reload the page and try again.";

// Every code that chatapp/ or nginx answers or streams; tests/test_error_sentences.py keeps this complete.
const SENTENCES = {
  not_authenticated: "Your session ended. Please sign in again.",
  signed_out: "This browser was signed out (a sign-out, or the password was changed). Please sign in again.",
  staff_only: "Only staff members can see this page.",
  invalid_credentials: "That username and password don't match. Please try again.",
  too_many_attempts: ({ retryAfter }) =>
    `Too many failed sign-ins. Please wait ${retryAfter ? `${retryAfter} seconds` : "a few minutes"} and try again.`,
  wrong_password: "That is not your current password. Please try again.",
  // Django's password validators word their own reasons for people: they are shown as they are.
  invalid_password: ({ details }) =>
    ["That new password can't be used.", ...(details?.length ? details : ["Please choose another one."])].join(" "),
  invalid_json: PAGE_OUTDATED,
  invalid_value: PAGE_OUTDATED,
  unsupported_media_type: PAGE_OUTDATED,
  method_not_allowed: PAGE_OUTDATED,
  not_found: "That conversation or message no longer exists. It may have been deleted.",
  invalid_cursor: "This conversation changed in another tab or window: it is shown as it is now.",
  empty_message: "Type a message first.",
  message_too_long: ({ maxMessageChars }) => (maxMessageChars
    ? `Your message is longer than ${maxMessageChars.toLocaleString("en")} characters. Please shorten it.`
    : "Your message is too long. Please shorten it."),
  // Older messages are left out for it already: a new conversation would refuse it the same.
  context_too_long: "This message is too long for the model to read, even alone. Please shorten it.",
  no_room_to_continue: "This answer and its question already fill what the model can read, so it cannot be continued. Regenerate it, or ask a shorter question.",
  title_too_long: "That title is too long. Please shorten it.",
  query_too_long: "That search is too long. Please shorten it.",
  too_many_watches: "Too many tabs are following answers. Close some of them, then try again.",
  system_prompt_too_long: "That system prompt is too long. Please shorten it.",
  temperature_out_of_range: "The temperature must be a number from 0 to 2.",
  top_p_out_of_range: "Top p must be a number above 0, up to 1.",
  unknown_model: "That model is not available. Please choose another one.",
  model_unavailable: "The model this conversation uses is not available right now. Choose another model above, or try again later.",
  too_many_streams: "Other answers are still being written. Wait for one to finish, or stop it, then try again.",
  conversation_busy: "An answer is still being written in this conversation. Wait for it, or stop it, then try again.",
  conversation_changed: "This conversation changed in another tab or window. Please try again.",
  not_a_user_message: "Only your own messages can be edited.",
  nothing_to_regenerate: "There is no answer to regenerate yet.",
  not_truncated: "Only an answer cut short at the length limit can be continued.",
  generation_ended: "That answer had already finished.",
  // The page's handing back of what it was shown (generation.js): said to nobody, kept complete.
  not_interrupted: "That answer was not interrupted; its text stays as stored.",
  answer_continued: "That answer was continued since; its text stays as stored.",
  text_differs: "The text on this page differs from the stored answer. Reload the page to see it.",
  invalid_proof: PAGE_OUTDATED,
  upstream_busy: MODEL_BUSY,
  upstream_unreachable: MODEL_UNREACHABLE,
  upstream_timeout: "The model took too long to answer. Please try again.",
  upstream_error: "The model could not answer this request. Please try again.",
  model_refuses_messages: "This model does not take the conversation as it is (some take no system prompt). Change the settings or the model, then try again.",
  upstream_disconnected: "The model stopped partway through its answer. The text so far is kept.",
  upstream_protocol: "The model sent something that could not be read. The text so far is kept.",
  interrupted: "The answer was interrupted on the server. The text so far is kept.",
  not_a_stream: "The server answered in an unexpected way. Please try again.",
  csrf_failed: "The page's security token is out of date. Reload the page and try again.",
  forbidden: "You are not allowed to do that.",
  bad_request: PAGE_OUTDATED,
  body_too_large: "That is too much to send at once. Please shorten it.",
  uri_too_long: "That search is too long to send. Please shorten it.",
  server_error: `Something went wrong on the server. ${TRY_AGAIN}`,
  server_unreachable: "The server can't be reached right now. Please try again in a moment.",
  database_unavailable: "The server's database isn't answering right now. Please try again in a moment.",
  server_timeout: "The server took too long to answer. Please try again.",
};

const GENERIC = `Something went wrong. ${TRY_AGAIN}`;

/** For an answer that is not ours (a proxy's error page, say): what its status suggests. */
function sentenceForStatus(status) {
  if (status === 401) return SENTENCES.not_authenticated;
  if (status === 413) return SENTENCES.message_too_long({});
  if (status === 429) return MODEL_BUSY;
  if (status >= 502 && status <= 504) return "The server can't be reached right now. Please try again in a moment.";
  return GENERIC;
}

/** An address that names no conversation of this user's (another account's reads the same). */
export const NO_SUCH_CONVERSATION = "There is no conversation at this address. It may have been deleted.";

/** A conversation found deleted, listed as `name` (null: not listed, or named by its address). */
export const sentenceForGone = (name) => (name === null ? NO_SUCH_CONVERSATION
  : `“${name}” was deleted in another tab, window or device: it is no longer listed.`);

/**
 * A sentence for `error`: an ApiError ({status, code, retryAfter, details}), a stream's error event
 * ({code}), or anything fetch throws (no code: the network failed). `context` may carry
 * `maxMessageChars` to name the limit.
 */
export function sentenceFor(error, context = {}) {
  const code = error?.code;
  const sentence = Object.hasOwn(SENTENCES, code ?? "") ? SENTENCES[code] : null;
  if (typeof sentence === "function") return sentence({ ...context, retryAfter: error.retryAfter, details: error.details });
  if (sentence) return sentence;
  if (code === "http_error") return sentenceForStatus(error.status);
  if (code === undefined && error instanceof TypeError) {
    return "Could not reach the server. Check your connection and try again.";
  }
  return GENERIC;
}

/**
 * `sentence` about a request of another conversation than the one on screen, named `name` (null:
 * not known); `isTextKept`: what the user wrote waits in that conversation's message box.
 */
export function sentenceElsewhere(name, sentence, isTextKept) {
  const kept = isTextKept ? " Your text is back in the message box when you open it." : "";
  return `${name === null ? "In another conversation" : `In “${name}”`}: ${sentence}${kept}`;
}

/** The codes with a sentence of their own (for the test that keeps the list complete). */
export const KNOWN_CODES = Object.freeze(Object.keys(SENTENCES));
