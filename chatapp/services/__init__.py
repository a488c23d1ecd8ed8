"""Writes: every change of a conversation, message, audit row or password goes through here.

conversations.py: conversations, messages and the start of an answer; generations.py: the rest
of one answer's life (status moves, the final write, partial saves, heartbeat, Stop);
stream_claims.py: a user's places among the answers streaming at once, taken before anything
goes upstream; accounts.py: a user's own password. Callers import them from here, as `services.<name>`.
"""

from .accounts import user_password_change
from .conversations import (
    MAX_TITLE_CHARS,
    AnswerPlan,
    AnswerStart,
    ShownLast,
    answer_continue,
    answer_regenerate,
    answer_unstarted,
    answer_write,
    conversation_create,
    conversation_delete,
    conversation_title_by_model,
    conversation_update,
    message_edit_and_resend,
    message_send,
    title_from,
    validate_content,
)
from .generations import (
    IllegalTransition,
    Outcome,
    PartialText,
    SentPiece,
    generation_finish,
    generation_heartbeat,
    generation_move,
    generation_recover,
    generation_save_partials,
    generation_stop,
)
from .stream_claims import stream_claim, stream_claim_release, stream_claims_purge_expired

__all__ = [
    "MAX_TITLE_CHARS", "AnswerPlan", "AnswerStart", "IllegalTransition", "Outcome", "PartialText", "SentPiece",
    "ShownLast",
    "answer_continue", "answer_regenerate", "answer_unstarted", "answer_write", "conversation_create",
    "conversation_delete", "conversation_title_by_model", "conversation_update", "generation_finish", "generation_heartbeat",
    "generation_move", "generation_recover", "generation_save_partials", "generation_stop", "message_edit_and_resend",
    "message_send", "stream_claim", "stream_claim_release", "title_from", "user_password_change", "validate_content",
]
