// The chat page's own elements (index.html), looked up once.
const $ = (id) => document.getElementById(id);

export const view = {
  newConversation: $("new-conversation"), title: $("conversation-title"),
  messages: $("messages"), earlier: $("earlier-messages"), empty: $("chat-empty"), form: $("composer-form"), composer: $("composer"),
  send: $("send"), stop: $("stop"), announcer: $("announcer"), alert: $("alert"), alertText: $("alert-text"),
  dismiss: $("alert-dismiss"), count: $("composer-count"),
};

/**
 * Where the page puts the focus for what the reader does next after it has shown them something
 * to read (a conversation picked, an answer's end): on a touch screen the messages, since the
 * message box's focus raises the keyboard over them (the message box is a tap away); elsewhere
 * the message box, to write at once.
 */
export const readingPlace = () => (matchMedia("(pointer: coarse)").matches ? view.messages : view.composer);
