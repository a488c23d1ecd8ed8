"""Writes: every change of a conversation, message or audit row goes through here.

conversations.py: conversations, messages and the start of an answer; generations.py: the rest
of one answer's life (status moves, the final write, partial saves, heartbeat, Stop). Callers
import them from here, as `services.<name>`.
"""

from .conversations import (
    AnswerPlan,
    AnswerStart,
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

__all__ = [
    "AnswerPlan", "AnswerStart", "IllegalTransition", "Outcome", "PartialText", "SentPiece",
    "answer_continue", "answer_regenerate", "answer_unstarted", "answer_write", "conversation_create",
    "conversation_delete", "conversation_title_by_model", "conversation_update", "generation_finish", "generation_heartbeat",
    "generation_move", "generation_recover", "generation_save_partials", "generation_stop", "message_edit_and_resend",
    "message_send", "title_from", "validate_content",
]
