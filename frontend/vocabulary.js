// The strings of an answer's life, as common/vocabulary.py spells them; a Python test compares
// the two lists, so they stay plain literals.
export const MESSAGE_STATUSES = Object.freeze(["streaming", "completed", "stopped", "truncated", "failed"]);
// A generation's status (GET /api/generations/<id>): a message's, plus a Stop not yet applied.
export const GENERATION_STATUSES = Object.freeze(["streaming", "stop_requested", "completed", "stopped", "truncated", "failed"]);
export const FINISH_REASONS = Object.freeze(["stop", "length", "content_filter", "cancelled", "error"]);
// Who or what cancelled an answer (a message's generation.cancelled_by; empty when nobody did).
export const CANCELLERS = Object.freeze(["user", "client_gone", "shutdown", "timeout", "admin", "signed_out"]);

// Named access (STATUS.STOPPED) without a second copy of the strings.
export const STATUS = Object.freeze(Object.fromEntries(MESSAGE_STATUSES.map((s) => [s.toUpperCase(), s])));
export const FINISH = Object.freeze(Object.fromEntries(FINISH_REASONS.map((s) => [s.toUpperCase(), s])));
export const CANCELLED_BY = Object.freeze(Object.fromEntries(CANCELLERS.map((s) => [s.toUpperCase(), s])));
