"""A conversation's own settings (model, system prompt, temperature, top_p): checked before
anything is stored, kept on the conversation, and sent upstream with its next answer. Two
stand-in upstreams serve two models, as our service and llama.cpp's server would."""

import contextlib
import json

import pytest
from asgiref.sync import sync_to_async

from chatapp.errors import ApiError
from chatapp.upstream import titles
from chatapp.models import Conversation, Generation, Message
from chatapp.upstream import models as upstream_models
from tests import factories, servers
from tests.chat.streams import read_events, text_of
from tests.fakes.upstream import DEFAULT_MODEL, FakeUpstream, Script

pytestmark = pytest.mark.django_db(transaction=True)
OTHER_MODEL = "llama-3.2-1b"


@pytest.fixture(scope="module")
def two_model_servers():
    with contextlib.ExitStack() as running:
        pair = [FakeUpstream(), FakeUpstream()]
        for fake in pair:
            fake.url = running.enter_context(servers.uvicorn_in_thread(fake))
        yield pair


@pytest.fixture
def two_models(two_model_servers, settings):
    """Two stand-in upstreams, the first serving the default model and the second another."""
    for fake, name, says, context in zip(two_model_servers, (DEFAULT_MODEL, OTHER_MODEL),
                                         ("from the default", "from the other"), (None, 4096)):
        fake.reset(Script(chunks=[says], context_tokens=context), models=[name])
    settings.INFERENCE_URL = ",".join(fake.url for fake in two_model_servers)
    upstream_models.forget()
    yield two_model_servers
    upstream_models.forget()


async def call(api, method: str, url: str, body=None):
    raw = body if isinstance(body, str) else json.dumps(body or {})
    return await getattr(api, method)(url, raw, content_type="application/json")


async def answer(api, conversation_id: int, path: str = "messages", body=None) -> str:
    response = await call(api, "post", f"/api/conversations/{conversation_id}/{path}",
                          {"content": "Hi"} if body is None else body)
    assert response.status_code == 200, response.content
    return text_of(await read_events(response))


def stored(conversation_id: int) -> tuple:
    found = Conversation.objects.get(pk=conversation_id)
    return found.model, found.system_prompt, found.temperature, found.top_p


def rows() -> tuple[int, int, int]:
    return Conversation.objects.count(), Message.objects.count(), Generation.objects.count()


async def test_the_settings_are_kept_and_sent_upstream_with_the_next_answer(api, user, two_models):
    created = await call(api, "post", "/api/conversations", {"system_prompt": "Talk like a pirate."})
    conversation_id = created.json()["id"]

    changed = await call(api, "patch", f"/api/conversations/{conversation_id}",
                         {"model": OTHER_MODEL, "temperature": 0.2, "top_p": 0.5})
    text = await answer(api, conversation_id)

    sent, _ = two_models[1].requests[0]
    assert created.json()["model"] == DEFAULT_MODEL
    assert changed.status_code == 200
    assert {key: changed.json()[key] for key in ("model", "temperature", "top_p")} == {
        "model": OTHER_MODEL, "temperature": 0.2, "top_p": 0.5}
    assert text == "from the other" and two_models[0].requests == []
    assert (sent["model"], sent["temperature"], sent["top_p"]) == (OTHER_MODEL, 0.2, 0.5)
    assert sent["messages"][0] == {"role": "system", "content": "Talk like a pirate."}
    generation = await sync_to_async(Generation.objects.get)(conversation_id=conversation_id)
    assert generation.model == OTHER_MODEL
    assert generation.sampling["temperature"] == 0.2 and generation.sampling["top_p"] == 0.5


async def test_a_conversation_without_sampling_of_its_own_uses_the_defaults(api, user, two_models, settings):
    settings.CHAT_TEMPERATURE, settings.CHAT_TOP_P = 0.6, 0.8
    conversation = await sync_to_async(factories.conversation)(owner=user, temperature=1.5)
    cleared = await call(api, "patch", f"/api/conversations/{conversation.pk}", {"temperature": None})

    await answer(api, conversation.pk)

    sent, _ = two_models[0].requests[0]
    assert cleared.json()["temperature"] is None
    assert (sent["model"], sent["temperature"], sent["top_p"]) == (DEFAULT_MODEL, 0.6, 0.8)


async def test_regenerate_may_ask_another_model_for_the_same_question(api, user, two_models):
    conversation = await sync_to_async(factories.conversation)(owner=user)
    first = await answer(api, conversation.pk)

    second = await answer(api, conversation.pk, "regenerate", {"model": OTHER_MODEL})

    asked_again, _ = two_models[1].requests[0]
    assert (first, second) == ("from the default", "from the other")
    assert asked_again["messages"][-1] == {"role": "user", "content": "Hi"}
    assert (await sync_to_async(stored)(conversation.pk))[0] == OTHER_MODEL
    models = await sync_to_async(list)(Generation.objects.filter(conversation=conversation)
                                       .order_by("pk").values_list("model", flat=True))
    assert models == [DEFAULT_MODEL, OTHER_MODEL]


@pytest.mark.parametrize("body, code", [
    ({"temperature": -0.1}, "temperature_out_of_range"),
    ({"temperature": 2.01}, "temperature_out_of_range"),
    ({"temperature": 10**400}, "temperature_out_of_range"),
    ({"temperature": "0.5"}, "temperature_out_of_range"),
    ({"temperature": True}, "temperature_out_of_range"),
    ({"top_p": 0}, "top_p_out_of_range"),
    ({"top_p": 1.5}, "top_p_out_of_range"),
    ('{"temperature": NaN}', "invalid_json"),
    ('{"top_p": Infinity}', "invalid_json"),
    ('{"temperature": 1e400}', "invalid_json"),
    ({"model": "no-such-model"}, "unknown_model"),
    ({"model": 7}, "invalid_value"),
    ({"system_prompt": "x" * 4001}, "system_prompt_too_long"),
])
async def test_a_setting_out_of_bounds_answers_400_with_a_code_and_stores_nothing(api, user, two_models, body, code):
    conversation = await sync_to_async(factories.conversation)(owner=user, system_prompt="Be brief.")
    before_rows, before = await sync_to_async(rows)(), await sync_to_async(stored)(conversation.pk)

    changed = await call(api, "patch", f"/api/conversations/{conversation.pk}", body)
    created = await call(api, "post", "/api/conversations", body)

    for response in (changed, created):
        assert response.status_code == 400
        assert response.json()["error"]["code"] == code
    assert await sync_to_async(stored)(conversation.pk) == before
    assert await sync_to_async(rows)() == before_rows


async def test_regenerate_with_an_unknown_model_answers_400_and_keeps_the_answer(api, user, two_models):
    conversation = await sync_to_async(factories.conversation)(owner=user)
    await answer(api, conversation.pk)
    before = await sync_to_async(rows)()

    response = await call(api, "post", f"/api/conversations/{conversation.pk}/regenerate", {"model": "gone"})

    assert response.status_code == 400 and response.json()["error"]["code"] == "unknown_model"
    assert await sync_to_async(rows)() == before
    assert len(two_models[0].requests) == 1


async def test_a_model_that_disappears_says_so_and_its_conversation_can_switch(api, user, two_models):
    conversation = await sync_to_async(factories.conversation)(owner=user, model=OTHER_MODEL)
    await answer(api, conversation.pk)
    two_models[1].models = []  # its upstream serves it no more (restarted with another)
    upstream_models.forget()
    before = await sync_to_async(rows)()

    refused = await call(api, "post", f"/api/conversations/{conversation.pk}/messages", {"content": "Again"})
    listed = (await api.get("/api/models")).json()
    after_refusal = await sync_to_async(rows)()
    switched = await call(api, "patch", f"/api/conversations/{conversation.pk}", {"model": DEFAULT_MODEL})
    text = await answer(api, conversation.pk)

    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "model_unavailable"
    assert OTHER_MODEL in refused.json()["error"]["message"]
    assert after_refusal == before
    assert [model["id"] for model in listed["models"]] == [DEFAULT_MODEL]
    assert switched.status_code == 200 and text == "from the default"
    history = await sync_to_async(list)(Message.objects.filter(conversation=conversation)
                                        .order_by("pk").values_list("content", flat=True))
    assert history == ["Hi", "from the other", "Hi", "from the default"]


async def test_a_model_whose_upstream_is_loading_again_is_busy_for_a_moment_not_gone(
        api, user, two_models, settings):
    """Ours answers its model list 503 while it loads (a restart): the catalogue keeps what it
    listed, and the answer is refused as busy, to be tried again, not as a model gone."""
    conversation = await sync_to_async(factories.conversation)(owner=user, model=OTHER_MODEL)
    await answer(api, conversation.pk)
    loading = two_models[1].script
    loading.status, loading.error_code, loading.models_status = 503, "service_unavailable", 503
    settings.INFERENCE_MODELS_INTERVAL_SECONDS = 0
    await upstream_models.fresh(waits=True)  # the catalogue read while it loads

    refused = await call(api, "post", f"/api/conversations/{conversation.pk}/messages", {"content": "Again"})

    assert refused.status_code == 503 and refused.json()["error"]["code"] == "upstream_busy"
    assert refused["Retry-After"] == "1"


async def test_a_conversation_keeps_a_model_gone_while_other_settings_change(api, user, two_models):
    conversation = await sync_to_async(factories.conversation)(owner=user, model="retired-model")

    changed = await call(api, "patch", f"/api/conversations/{conversation.pk}",
                         {"model": "retired-model", "system_prompt": "Be kind."})

    assert changed.status_code == 200
    assert await sync_to_async(stored)(conversation.pk) == ("retired-model", "Be kind.", None, None)


async def test_the_models_endpoint_lists_every_upstreams_models_and_the_last_one_used(api, user, two_models):
    before = (await api.get("/api/models")).json()
    conversation = await sync_to_async(factories.conversation)(owner=user, model=OTHER_MODEL)
    await answer(api, conversation.pk)

    after = (await api.get("/api/models")).json()

    assert [model["id"] for model in before["models"]] == [DEFAULT_MODEL, OTHER_MODEL]
    assert [m["max_model_len"] for m in before["models"]] == [None, 4096]  # as each upstream says
    assert before["default_model"] == DEFAULT_MODEL
    assert (before["last_used_model"], after["last_used_model"]) == (None, OTHER_MODEL)
    assert after["sampling"]["temperature"]["max"] == 2
    assert after["max_system_prompt_chars"] == 4000


async def test_an_upstream_without_a_model_list_serves_the_default_model(api, user, upstream):
    upstream.models = None
    upstream_models.forget()
    conversation = await sync_to_async(factories.conversation)(owner=user)

    text = await answer(api, conversation.pk)
    listed = (await api.get("/api/models")).json()

    assert text == "Hello, world!"
    assert [model["id"] for model in listed["models"]] == [DEFAULT_MODEL]


def test_the_title_is_asked_of_the_conversations_model(user, two_models):
    conversation = factories.conversation(owner=user, model=OTHER_MODEL)
    factories.message(conversation, content="Soup recipes")
    factories.message(conversation, role="assistant", status="completed", content="Tomato soup.")

    titles.title_conversation(conversation.pk)  # the stand-in streams, which is no title: None

    asked, _ = two_models[1].requests[-1]
    assert (asked["model"], asked["stream"]) == (OTHER_MODEL, False)
    assert two_models[0].requests == []


def test_a_change_read_before_a_delete_leaves_the_conversation_deleted(user):
    from chatapp import selectors, services

    conversation = factories.conversation(owner=user)
    read = selectors.conversation_get(user=user, conversation_id=conversation.pk)  # a PATCH's read
    services.conversation_delete(conversation=Conversation.objects.get(pk=conversation.pk))

    with pytest.raises(ApiError) as refused:
        services.conversation_update(conversation=read, choices={"temperature": 0.5})

    assert refused.value.status == 404
    assert Conversation.objects.get(pk=conversation.pk).deleted_at is not None


def test_a_change_read_before_the_first_message_keeps_the_title_that_message_gave(user):
    from chatapp import services

    conversation = services.conversation_create(owner=user)
    read = Conversation.objects.get(pk=conversation.pk)  # a PATCH's read
    services.answer_write(plan=services.message_send(user=user, conversation=conversation,
                                                     content="Soup recipes"))

    services.conversation_update(conversation=read, choices={"temperature": 0.5})

    found = Conversation.objects.get(pk=conversation.pk)
    assert (found.title, found.temperature) == ("Soup recipes", 0.5)
