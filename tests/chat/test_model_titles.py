"""After a conversation's first answer the model names it, unless the user named it meanwhile;
whatever goes wrong leaves the title its first message gave it."""

import contextlib
import os

import pytest
from asgiref.sync import sync_to_async

from chatapp.models import Conversation
from chatapp.upstream import titles
from harness import waiting
from harness import ports
from tests import factories
from tests.celery_worker import DEFAULT_QUEUE, celery_worker
from tests.chat.streams import read_events

pytestmark = pytest.mark.django_db(transaction=True)


async def ask(api, conversation_id: int, content: str) -> list:
    return await read_events(await api.post(f"/api/conversations/{conversation_id}/messages",
                                            {"content": content}, content_type="application/json"))


def title_of(conversation_id: int) -> str:
    return Conversation.objects.get(pk=conversation_id).title


@pytest.fixture
def answered(transactional_db):
    """A conversation whose first question got its answer, titled by the question's first line."""
    conversation = factories.conversation(title="Soup recipes")
    factories.message(conversation, content="Soup recipes\nquick ones, please")
    factories.message(conversation, role="assistant", status="completed",
                      content="Tomato soup: tomatoes, onion, stock; twenty minutes.")
    return conversation


async def test_the_first_answers_done_says_a_title_was_asked_for_and_the_seconds_does_not(
        api, conversation, upstream, settings):
    settings.CHAT_MODEL_TITLES = True
    first = await ask(api, conversation.pk, "Soup recipes")
    second = await ask(api, conversation.pk, "And bread?")

    assert first[-1][1]["title_requested"] is True
    assert "title_requested" not in second[-1][1]


async def test_no_title_is_asked_for_when_model_titles_are_off(api, conversation, upstream, settings):
    settings.CHAT_MODEL_TITLES = False

    done = (await ask(api, conversation.pk, "Soup recipes"))[-1][1]

    assert "title_requested" not in done


def test_an_unreachable_inference_service_leaves_the_first_line_title(answered, settings):
    settings.INFERENCE_URL = f"http://127.0.0.1:{ports.free_port()}"

    assert titles.title_conversation(answered.pk) is None
    assert title_of(answered.pk) == "Soup recipes"


def test_an_inference_service_that_refuses_leaves_the_first_line_title(answered, upstream):
    upstream.script.status = 500

    assert titles.title_conversation(answered.pk) is None
    assert title_of(answered.pk) == "Soup recipes"


@pytest.mark.parametrize("status, asked", [(503, 2), (429, 2), (500, 2), (400, 1)])
def test_a_title_request_passes_to_the_next_replica_by_the_relays_refusal_rules(
        answered, upstream, settings, status, asked):
    settings.INFERENCE_URL = f"{settings.INFERENCE_URL},{settings.INFERENCE_URL}"  # the stand-in twice
    upstream.script.status = status

    assert titles.title_conversation(answered.pk) is None
    assert len(upstream.requests) == asked  # busy or failing: the next; the request refused: nobody else


def test_an_answer_that_is_no_chat_completion_leaves_the_first_line_title(answered, upstream):
    # The stand-in upstream answers every request with a stream, which is not what was asked.
    assert titles.title_conversation(answered.pk) is None
    assert title_of(answered.pk) == "Soup recipes"


def test_a_conversation_renamed_before_the_task_runs_keeps_its_name(answered, monkeypatch):
    Conversation.objects.filter(pk=answered.pk).update(title="My soups", title_set_by_user=True)
    monkeypatch.setattr(titles, "ask", lambda question, answer: pytest.fail("the model was asked"))

    assert titles.title_conversation(answered.pk) is None
    assert title_of(answered.pk) == "My soups"


def test_a_rename_that_lands_while_the_model_is_asked_is_kept(answered, monkeypatch):
    def rename_meanwhile(question, answer, model):  # fault injection: the user renames mid-request
        from chatapp import services

        services.conversation_update(conversation=Conversation.objects.get(pk=answered.pk), title="My soups")
        return "Quick Soup Recipes"

    monkeypatch.setattr(titles, "ask", rename_meanwhile)

    assert titles.title_conversation(answered.pk) is None
    assert title_of(answered.pk) == "My soups"


def test_a_first_message_edited_while_the_model_is_asked_keeps_the_title_of_its_new_first_line(
        answered, monkeypatch):
    def edit_meanwhile(question, answer, model):
        Conversation.objects.filter(pk=answered.pk).update(title="Salad ideas")
        return "Quick Soup Recipes"

    monkeypatch.setattr(titles, "ask", edit_meanwhile)

    assert titles.title_conversation(answered.pk) is None
    assert title_of(answered.pk) == "Salad ideas"


# --- with the real model ---

def title_worker(inference_url: str):
    """With Redis, a real Celery worker takes the title tasks; without it they run in-process."""
    if not os.environ.get("REDIS_URL"):
        return contextlib.nullcontext()
    return celery_worker(DEFAULT_QUEUE, INFERENCE_URL=inference_url)


@pytest.mark.slow
async def test_the_real_model_names_a_conversation_after_its_first_answer(
        api, conversation, settings, real_model_url):
    settings.INFERENCE_URL = real_model_url
    settings.CHAT_MODEL_TITLES = True
    settings.CHAT_MAX_TOKENS = 40
    # A greedy answer, so the title's prompt is the same every run: a sampled one now and then
    # led the model to a title that `titles.cleaned` refuses, and the question's line stayed.
    settings.CHAT_TEMPERATURE = 0

    with title_worker(real_model_url):
        done = (await ask(api, conversation.pk, "What is the capital of France?"))[-1][1]
        await sync_to_async(waiting.wait_until)(
            lambda: title_of(conversation.pk) != "What is the capital of France?", 60,
            "the model's title to be saved")

    title = await sync_to_async(title_of)(conversation.pk)
    assert done["title_requested"] is True
    assert titles.cleaned(title) == title and 1 <= len(title.split()) <= titles.MAX_WORDS


@pytest.mark.slow
def test_the_real_models_title_is_not_saved_over_a_rename(answered, settings, real_model_url):
    settings.INFERENCE_URL = real_model_url
    Conversation.objects.filter(pk=answered.pk).update(title="My soups", title_set_by_user=True)

    assert titles.title_conversation(answered.pk) is None
    assert title_of(answered.pk) == "My soups"


@pytest.mark.slow
def test_a_replica_that_cannot_be_reached_passes_the_title_request_to_the_next(
        answered, settings, real_model_url):
    settings.INFERENCE_URL = f"http://127.0.0.1:{ports.free_port()},{real_model_url}"

    for _ in range(2):  # the replicas take turns at being tried first: each is, once
        Conversation.objects.filter(pk=answered.pk).update(title="Soup recipes")
        title = titles.title_conversation(answered.pk)
        assert title is not None and title_of(answered.pk) == title


def test_no_replica_that_answers_leaves_the_first_line_title(answered, settings):
    settings.INFERENCE_URL = ",".join(f"http://127.0.0.1:{ports.free_port()}" for _ in range(2))

    assert titles.title_conversation(answered.pk) is None
    assert title_of(answered.pk) == "Soup recipes"


def test_a_replica_that_cannot_be_reached_for_a_title_is_not_asked_first_for_the_next(
        answered, upstream, settings, monkeypatch):
    dead = f"http://127.0.0.1:{ports.free_port()}"
    settings.INFERENCE_URL = f"{dead},{settings.INFERENCE_URL}"
    asked = []
    post = titles.httpx2.Client.post

    def recorded(client, url, **options):  # the request goes on as it was; its address noted
        asked.append(url.removesuffix("/v1/chat/completions"))
        return post(client, url, **options)

    monkeypatch.setattr(titles.httpx2.Client, "post", recorded)
    for _ in range(4):  # the replicas take turns at being tried first
        titles.title_conversation(answered.pk)  # (the stand-in's stream is no title: None)

    assert asked.count(dead) == 1 and len(asked) == 5  # failed once, then asked after the one that answers
