// The chat page's own elements (index.html), looked up once.
const $ = (id) => document.getElementById(id);

export const view = {
  newConversation: $("new-conversation"), title: $("conversation-title"),
  messages: $("messages"), earlier: $("earlier-messages"), empty: $("chat-empty"), form: $("composer-form"), composer: $("composer"),
  send: $("send"), stop: $("stop"), announcer: $("announcer"), alert: $("alert"), alertText: $("alert-text"),
  dismiss: $("alert-dismiss"), count: $("composer-count"),
};
