"""The JSON shape of each object the API answers with (docs/api.md names their fields)."""


def user_json(user) -> dict | None:
    if not user.is_authenticated:
        return None
    return {"id": user.pk, "username": user.username, "is_staff": user.is_staff}


def conversation_json(conversation) -> dict:
    return {"id": conversation.pk, "title": conversation.title,
            "system_prompt": conversation.system_prompt, "model": conversation.model_name,
            "temperature": conversation.temperature, "top_p": conversation.top_p,
            "created_at": conversation.created_at.isoformat(),
            "updated_at": conversation.updated_at.isoformat()}


def message_json(message) -> dict:
    generations = list(message.generations.all())  # read with the message (selectors.message_page)
    latest = generations[-1] if generations else None
    return {"id": message.pk, "role": message.role, "content": message.content,
            "status": message.status, "created_at": message.created_at.isoformat(),
            "generation": None if latest is None else {
                "id": latest.pk, "status": latest.status, "finish_reason": latest.finish_reason,
                "cancelled_by": latest.cancelled_by, "context_from_message_id": latest.context_from_message_id,
                "ttft_ms": latest.ttft_ms, "output_tokens": latest.output_tokens}}


def generation_json(generation) -> dict:
    """Where one generation stands, with its answer's message and its audit figures."""
    message = generation.message
    saved = message.content if message is not None else generation.final_text
    return {"id": generation.pk, "status": generation.status,
            "message_id": generation.message_id, "message_status": message and message.status,
            "text_length": len(saved), "finish_reason": generation.finish_reason,
            "cancelled_by": generation.cancelled_by, "error_code": generation.error_code,
            "ttft_ms": generation.ttft_ms, "itl_mean_ms": generation.itl_mean_ms,
            "itl_max_ms": generation.itl_max_ms, "input_tokens": generation.input_tokens,
            "output_tokens": generation.output_tokens,
            "created_at": _iso(generation.started_at), "first_token_at": _iso(generation.first_token_at),
            "finished_at": _iso(generation.finished_at)}


def _iso(moment) -> str | None:
    return None if moment is None else moment.isoformat()
