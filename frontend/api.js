// The JSON API of docs/api.md: session cookie auth, CSRF header on unsafe methods.

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
  }
}

function cookie(name) {
  const prefix = `${name}=`;
  for (const part of document.cookie.split(";")) {
    const item = part.trim();
    if (item.startsWith(prefix)) return decodeURIComponent(item.slice(prefix.length));
  }
  return "";
}

function request(path, { method = "GET", body, signal, accept = "application/json", keepalive = false } = {}) {
  const headers = { Accept: accept };
  if (method !== "GET" && method !== "HEAD") {
    // Read on every request: Django rotates the token when the user signs in.
    headers["X-CSRFToken"] = cookie("csrftoken");
  }
  if (body !== undefined) headers["Content-Type"] = "application/json";
  return fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin",
    signal,
    keepalive, // outlives the page: sent as it goes (kept_pieces.js)
  });
}

async function errorOf(response) {
  try {
    const { error } = await response.json();
    if (error?.message) {
      const refusal = new ApiError(response.status, error.code || "error", error.message);
      // Seconds to wait, for a 429 (the page words it; the message is the server's).
      refusal.retryAfter = Number(response.headers.get("Retry-After")) || null;
      // The reasons of a refusal that has several, each a sentence for people (invalid_password).
      refusal.details = Array.isArray(error.details) ? error.details.filter((detail) => typeof detail === "string") : [];
      return refusal;
    }
  } catch {
    // Not our JSON (a proxy's HTML error page, say): describe it by its status.
  }
  return new ApiError(response.status, "http_error", `The server answered ${response.status} ${response.statusText}`.trim());
}

async function json(path, options) {
  const response = await request(path, options);
  if (!response.ok) throw await errorOf(response);
  if (response.status === 204) return null;
  return response.json();
}

/** POSTs (or GETs) and resolves to the streaming Response, or rejects with the API's error. */
export async function openStream(path, body, signal, method = "POST") {
  const response = await request(path, { method, body, signal, accept: "text/event-stream" });
  if (!response.ok) throw await errorOf(response);
  if (!(response.headers.get("Content-Type") || "").startsWith("text/event-stream")) {
    throw new ApiError(response.status, "not_a_stream", "The server did not answer with a stream");
  }
  return response;
}

const id = (value) => encodeURIComponent(String(value));

// A NUL, pasted from a terminal or a binary file, shows as nothing, and the server refuses text
// holding one (PostgreSQL cannot store it: 400 invalid_value), which the page could only call
// outdated: what the user wrote goes without it. Half an emoji (a lone surrogate, pasted from a
// page that cut one in two) is refused alike: it goes as U+FFFD, the character the page draws.
const written = (text) => (typeof text === "string" ? text.replaceAll("\u0000", "").toWellFormed() : text);
const lastShown = (shown) => ({ last_message_id: shown?.id ?? null, last_message_chars: shown?.chars ?? null });
const writtenSettings = (choices) =>
  ("system_prompt" in choices ? { ...choices, system_prompt: written(choices.system_prompt) } : choices);

export const api = {
  session: () => json("/api/auth/session"),
  login: (username, password) => json("/api/auth/login", { method: "POST", body: { username, password } }),
  logout: () => json("/api/auth/logout", { method: "POST" }),
  changePassword: (oldPassword, newPassword) =>
    json("/api/auth/password", { method: "POST", body: { old_password: oldPassword, new_password: newPassword } }),

  // The list's first page, or (`after`: the `next` of the page read last) the one after it.
  conversations: (q = "", after = null) =>
    json(`/api/conversations?${new URLSearchParams({ q: written(q), ...(after === null ? {} : { after }) })}`),
  createConversation: (choices = {}) => json("/api/conversations", { method: "POST", body: writtenSettings(choices) }),
  conversation: (cid) => json(`/api/conversations/${id(cid)}`),
  // The model, the system prompt, temperature and top_p (null: the default).
  updateConversation: (cid, changes) => json(`/api/conversations/${id(cid)}`, { method: "PATCH", body: writtenSettings(changes) }),
  models: () => json("/api/models"),
  renameConversation: (cid, title) => json(`/api/conversations/${id(cid)}`, { method: "PATCH", body: { title: written(title) } }),
  deleteConversation: (cid) => json(`/api/conversations/${id(cid)}`, { method: "DELETE" }),
  // The newest page of a conversation's messages, or (`before`, a message's id) the page before it.
  messages: (cid, { before = null } = {}) =>
    json(`/api/conversations/${id(cid)}/messages${before === null ? "" : `?before=${id(before)}`}`),

  send: (cid, content) => (signal) => openStream(`/api/conversations/${id(cid)}/messages`, { content: written(content) }, signal),
  // Both drop messages: they name the last one the page shows and its length as read
  // (`{id, chars}`, history.js; null: not known), and the server refuses them once another tab
  // or device has written after it, or on in it (409 conversation_changed).
  regenerate: (cid, shownLast = null) => (signal) =>
    openStream(`/api/conversations/${id(cid)}/regenerate`, lastShown(shownLast), signal),
  edit: (mid, content, shownLast = null) => (signal) =>
    openStream(`/api/messages/${id(mid)}/edit`, { content: written(content), ...lastShown(shownLast) }, signal),
  continueAnswer: (mid) => (signal) => openStream(`/api/messages/${id(mid)}/continue`, undefined, signal),
  // Follows an answer that another tab, device or an earlier visit of this page started.
  watch: (gid) => (signal) => openStream(`/api/generations/${id(gid)}/events`, undefined, signal, "GET"),
  // The same answer again after a lost connection, its text from the `offset`-th character on.
  resume: (gid, offset) => (signal) =>
    openStream(`/api/generations/${id(gid)}/events?from=${id(offset)}`, undefined, signal, "GET"),

  // One request: the page sends it again until the server answers (reconnect.js, deliverStop).
  stop: (gid, seenChars) => json(`/api/generations/${id(gid)}/stop`, { method: "POST", body: { seen_chars: seenChars }, keepalive: true }),
  // What the page was sent of an answer whose relay died before saving it, with each piece's proof.
  // keepalive: sent as the page goes (kept_pieces.js).
  recover: (gid, pieces, { keepalive = false } = {}) =>
    json(`/api/generations/${id(gid)}/recover`, { method: "POST", body: { pieces }, keepalive }),
  // Staff only, from the live view (staff/live/): stops anyone's answer.
  staffStop: (gid) => json(`/api/staff/generations/${id(gid)}/stop`, { method: "POST" }),
};
