// What counts as text in a message, as the server counts it (chatapp/services/conversations.py):
// spaces, control and invisible format characters alone (a zero-width space, a byte-order mark)
// say nothing, and the server refuses them as an empty message.
const NOTHING_BUT_BLANKS = /^[\s\p{Cc}\p{Cf}]*$/u;

/** Whether `text` holds something a reader would see. */
export const hasText = (text) => !NOTHING_BUT_BLANKS.test(text);
