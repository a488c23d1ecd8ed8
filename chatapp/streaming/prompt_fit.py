"""The prompt that fits: as many of the newest messages as the model can read with the answer.

The budget is the upstream's context (token_counts.context_tokens, read once per upstream and
model; `CHAT_CONTEXT_TOKENS` caps it, and stands in for an upstream that does not say it) less
the `max_tokens` this answer asks for. The system prompt and the newest message always stay;
what is left out goes by whole exchanges, so that the prompt starts at a question (templates
such as Gemma's refuse a conversation that starts with an answer).

One count per answer, by the upstream, of the prompt chosen from what earlier counts taught
(chatapp/streaming/token_memory.py): only what is new since the conversation's last count is estimated.
A choice the count proves too long loses its oldest messages, each taken at a floor of what it
costs, until it surely fits; a newest message that leaves less room than asked gets a shorter
answer (it may stop as `length`, with Continue). An upstream that cannot count (no such
endpoint) gets the conservative estimate, as its context does the fallback.
"""

from django.conf import settings

from common.vocabulary import FinishReason

from ..errors import ApiError
from ..models import Message
from ..services import AnswerPlan
from ..upstream import inference_replicas, token_counts
from . import token_memory
from .token_memory import MAX_BYTES_PER_TOKEN, Memory, Piece

# The context assumed for an upstream that does not say its own, with no CHAT_CONTEXT_TOKENS.
FALLBACK_CONTEXT_TOKENS = 2048


def forget() -> None:
    """Learn every upstream anew (tests; a replica replaced by another kind of server)."""
    token_memory.forget()
    token_counts.forget()


async def fit(plan: AnswerPlan) -> None:
    """Fits the plan's prompt, and its max_tokens to the room left; raises 400 context_too_long
    when the newest message alone leaves the model no room to answer."""
    url, model = _counting_url(plan.model), plan.model
    context = await _context(url, model)
    budget = context - plan.sampling["max_tokens"]
    prompt = plan.conversation.system_prompt
    system = [Piece.of("system", prompt)] if prompt else []
    kept = _kept(plan.said, plan.continue_final_message)
    reachable = _reachable(plan.said, context, kept)
    messages = [Piece.of(m.role, m.content, m) for m in reachable]
    newest = len(messages) - kept  # the first of the messages that always stay
    memory = Memory(url, model, plan.conversation.pk)
    start = min(memory.start_that_fits(system, messages, budget), newest)
    counted = await _count(url, model, memory, system + messages[start:], plan.continue_final_message)
    if counted is None:
        tokens = memory.estimate(system + messages[start:])
    else:
        tokens = counted
        while start < newest and (tokens > budget or not messages[start].is_question):
            tokens -= messages[start].floor
            start += 1
    if tokens >= context:
        raise await _too_long(url, model, memory, system, tokens, context, plan.continue_final_message)
    plan.prompt = [p.entry for p in system + messages[start:]]
    plan.sampling = {**plan.sampling, "max_tokens": min(plan.sampling["max_tokens"], context - tokens)}
    left_out = start > 0 or len(reachable) < len(plan.said)
    plan.context_from = messages[start].message if left_out else None


async def _count(url: str, model: str, memory: Memory, pieces: list[Piece], continuing: bool) -> int | None:
    """The upstream's count of the prompt: of only the messages new since the conversation's
    last count where the template adds messages up (a tenth of the text to tokenize in a long
    conversation), else of all of it. A continuation's template ends differently: counted
    whole, and no conversation's last count."""
    if continuing:
        memory.forget_last()
        return await token_counts.prompt_tokens(url, model, [p.entry for p in pieces], continue_final_message=True)
    since = memory.new_since_last(pieces)
    fixed = None if since is None else await token_counts.list_tokens(url, model)
    counted = None
    if fixed is not None:
        then, added = since
        new = await token_counts.prompt_tokens(url, model, [p.entry for p in added])
        counted = None if new is None else then + new - fixed
    if counted is None:
        counted = await token_counts.prompt_tokens(url, model, [p.entry for p in pieces])
    if counted is not None:
        memory.learn(pieces, counted)
    return counted


async def _too_long(url: str, model: str, memory: Memory, system: list[Piece], tokens: int,
                    context: int, continuing: bool) -> ApiError:
    """The refusal of a prompt that leaves the model no room to answer: the system prompt's
    where it is the greater part (every message of the conversation would be refused until its
    settings change; its characters were within bounds, its tokens are not), else the message's."""
    if system:
        alone = await token_counts.prompt_tokens(url, model, [system[0].entry])
        alone = memory.estimate(system) if alone is None else alone
        if 2 * alone > tokens:
            return ApiError(400, "system_prompt_too_long",
                            f"the conversation's system prompt takes about {alone} of the model's "
                            f"{context} tokens of context; shorten it in the conversation's settings")
    if continuing:
        return ApiError(400, "no_room_to_continue",
                        "the answer and its question fill the model's context: there is no room to continue it")
    return ApiError(400, "context_too_long", "the message is too long for the model's context")


def answered(*, conversation_id: int, model: str, text: str, usage: dict | None,
             finish_reason: FinishReason | None) -> None:
    """An answer ended whole (not stopped, not continued): the tokens its upstream generated
    are what it will cost in the next prompt, near enough to split that prompt's count by."""
    completion_tokens = (usage or {}).get("completion_tokens")
    if isinstance(completion_tokens, int) and finish_reason in (FinishReason.STOP, FinishReason.LENGTH):
        Memory(_counting_url(model), model, conversation_id).answered(
            text, completion_tokens, ended_by_stop=finish_reason == FinishReason.STOP)


def _counting_url(model: str) -> str:
    """Every replica of a model counts alike: one that lately answered counts (none: the estimate)."""
    return inference_replicas.first_answering_url(model)


async def _context(url: str, model: str) -> int:
    said = await token_counts.context_tokens(url, model)
    cap = settings.CHAT_CONTEXT_TOKENS
    if said is None:
        return cap or FALLBACK_CONTEXT_TOKENS
    return min(said, cap) if cap else said


def _kept(said: list[Message], continuing: bool) -> int:
    """How many of the newest messages the prompt always holds: the newest, and for a
    continuation its question too, whole exchanges as ever (an answer read alone, its question
    left out, is written on blind, and templates such as Gemma's refuse a prompt that starts
    with an answer); one that does not fit then is refused."""
    if continuing and len(said) >= 2 and said[-2].role == Message.Role.USER:
        return 2
    return 1


def _reachable(said: list[Message], context: int, kept: int = 1) -> list[Message]:
    """The newest messages that could fit at all: older ones are not even weighed; the `kept`
    newest are always there (the fit refuses them when they are too long)."""
    room = context * MAX_BYTES_PER_TOKEN
    for index in range(len(said) - 1, -1, -1):
        room -= len(said[index].content)  # at least a byte a character
        if room < 0:
            return said[min(index + 1, len(said) - kept):]
    return said
