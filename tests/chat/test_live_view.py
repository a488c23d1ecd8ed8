"""The admins' live view: staff only, it lists the answers streaming now and each replica's load."""

import asyncio
from datetime import timedelta

import httpx2
import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
from django.test import AsyncClient, Client
from django.urls import reverse
from django.utils import timezone

from chatapp.staff import selectors as staff_selectors
from chatapp.upstream.replica_figures import parse_load, replica_loads
from chatapp.models import Generation
from common.vocabulary import GenerationStatus
from harness import ports
from tests import factories
from tests.chat.streams import Browser, EventReader, names
from tests.inference import models
from tests.inference.serving import service_for, serving

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def staff(transactional_db):
    return factories.staff_member()


def answer_in(conversation, **fields) -> Generation:
    """A generation of an assistant message in `conversation`, streaming unless told otherwise."""
    return factories.generation(factories.message(conversation, role="assistant"), **fields)


@pytest.mark.parametrize("is_staff", [False, None], ids=["a plain user", "anonymous"])
def test_the_live_view_page_sends_anyone_who_is_not_staff_to_the_admin_login(client, is_staff):
    if is_staff is not None:
        client.force_login(factories.user(is_staff=is_staff))

    page = client.get(reverse("staff-live"))

    assert page.status_code == 302 and page["Location"].startswith(reverse("admin:login"))


def test_staff_get_the_live_view_page(client, staff):
    client.force_login(staff)

    page = client.get(reverse("staff-live"))

    assert page.status_code == 200
    assert "<h1>Live answers</h1>" in page.content.decode() and "/live_view.js" in page.content.decode()


def test_a_plain_user_may_neither_watch_the_live_events_nor_stop_an_answer_there(client, user, conversation):
    generation = answer_in(conversation)
    client.force_login(user)

    events = client.get(reverse("api:live-events"))
    stop = client.post(reverse("api:staff-stop", args=[generation.pk]))

    assert events.status_code == 403 and events.json()["error"]["code"] == "staff_only"
    assert stop.status_code == 403 and stop.json()["error"]["code"] == "staff_only"
    assert Generation.objects.get(pk=generation.pk).status == GenerationStatus.STREAMING


def test_staff_not_granted_the_review_of_answers_see_neither_the_page_nor_its_events(client):
    """As the admin refuses them the Generation list: being staff is not the right to read every
    user's answers."""
    client.force_login(factories.staff_member("chatapp.view_conversation"))

    page = client.get(reverse("staff-live"))
    events = client.get(reverse("api:live-events"))

    assert page.status_code == 403
    assert events.status_code == 403 and events.json()["error"]["code"] == "staff_only"
    assert "chatapp.view_generation" in events.json()["error"]["message"]


def test_staff_who_may_review_but_not_stop_get_no_stop_and_their_stop_is_refused(client, conversation):
    generation = answer_in(conversation)
    client.force_login(factories.staff_member("chatapp.view_generation"))

    page = client.get(reverse("staff-live"))
    stop = client.post(reverse("api:staff-stop", args=[generation.pk]))

    assert page.status_code == 200 and 'data-may-stop="false"' in page.content.decode()
    assert stop.status_code == 403 and stop.json()["error"]["code"] == "staff_only"
    assert Generation.objects.get(pk=generation.pk).status == GenerationStatus.STREAMING
    client.force_login(factories.staff_member())
    assert 'data-may-stop="true"' in client.get(reverse("staff-live")).content.decode()


def test_staff_who_may_stop_but_not_review_can_neither_stop_an_answer_nor_learn_of_it(client, conversation):
    """Stopping is done from the live view, which they may not see: by id alone their Stop was
    taken, and its answer (202 and the status; 409 naming how it ended) told them of answers
    they may not review."""
    streaming, ended = answer_in(conversation), answer_in(conversation, status=GenerationStatus.COMPLETED)
    client.force_login(factories.staff_member("chatapp.stop_generation"))

    answers = [client.post(reverse("api:staff-stop", args=[pk])) for pk in (streaming.pk, ended.pk, 987654)]

    assert [(a.status_code, a.json()) for a in answers][:2] == [(403, answers[2].json())] * 2
    assert answers[2].status_code == 403 and answers[2].json()["error"]["code"] == "staff_only"
    assert "chatapp.view_generation" in answers[0].json()["error"]["message"]
    assert Generation.objects.get(pk=streaming.pk).status == GenerationStatus.STREAMING


def test_anonymous_visitors_are_told_to_sign_in_first(client):
    assert client.get(reverse("api:live-events")).status_code == 401


def test_an_admin_stop_without_the_csrf_token_is_refused(staff, user, conversation):
    generation = answer_in(conversation)
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(staff)

    stop = browser.post(reverse("api:staff-stop", args=[generation.pk]))

    assert stop.status_code == 403
    assert Generation.objects.get(pk=generation.pk).status == GenerationStatus.STREAMING


def test_an_admin_stop_of_an_answer_that_does_not_exist_is_not_found(client, staff):
    client.force_login(staff)

    assert client.post(reverse("api:staff-stop", args=[987654])).status_code == 404


def test_the_streams_listed_are_every_users_live_answers_only(user, other_user):
    mine = answer_in(factories.conversation(owner=user, title="Mine"), final_text="Hello")
    theirs = answer_in(factories.conversation(owner=other_user))
    answer_in(mine.conversation, finish_reason="stop")

    streams = staff_selectors.streams_now()

    assert [s["generation_id"] for s in streams] == [mine.pk, theirs.pk]
    assert streams[0]["username"] == user.username and streams[0]["conversation_title"] == "Mine"
    assert streams[0]["chars_so_far"] == len("Hello") and streams[0]["age_s"] >= 0


async def test_a_replica_says_its_running_and_waiting_sequences_and_cache_use(settings):
    engine = models.engine(models.tiny_model(), max_running=4, max_model_len=128, max_cached_tokens=1024)
    with serving(service_for(engine)) as url:
        settings.INFERENCE_URL = url
        httpx2.post(f"{url}/v1/chat/completions", json={
            "model": "tiny-test-model", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]},
            timeout=60)
        [load] = await replica_loads()

    assert load.url == url and load.reachable
    assert load.running == 0 and load.waiting == 0
    assert load.cache_usage is not None and 0 <= load.cache_usage <= 1


async def test_every_listed_replica_is_shown_and_one_that_does_not_answer_as_unreachable(settings, upstream):
    upstream.metrics = "inference_running_sequences 2\ninference_waiting_sequences 5\n"
    dead = f"http://127.0.0.1:{ports.free_port()}"
    settings.INFERENCE_URL = f"{settings.INFERENCE_URL},{dead}"

    answering, down = await replica_loads()

    assert answering.reachable and (answering.running, answering.waiting) == (2, 5)
    assert down.url == dead and not down.reachable and down.running is None and "ConnectError" in down.error


VLLM_METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-8B"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3-8B"} 1.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-8B"} 0.25
"""


def test_a_vllm_replicas_figures_are_read_under_vllms_own_names():
    load = parse_load("http://vllm:8000", VLLM_METRICS)

    assert (load.running, load.waiting, load.cache_usage) == (3.0, 1.0, 0.25)


def test_a_replica_that_exports_none_of_the_figures_shows_none():
    load = parse_load("http://elsewhere", "# TYPE up gauge\nup 1\n")

    assert load.reachable and (load.running, load.waiting, load.cache_usage) == (None, None, None)


async def test_an_admin_stop_ends_a_streaming_answer_keeping_all_its_user_was_sent(api, conversation, upstream):
    upstream.script.chunks = ["Alpha", " beta", " gamma", " delta", " epsilon"]
    upstream.script.interval_s = 0.2
    answer = Browser(api, f"/api/conversations/{conversation.pk}/messages")
    await answer.post({"content": "go"})
    await answer.read_until(deltas=2)
    admin = AsyncClient()
    await admin.aforce_login(await sync_to_async(factories.staff_member)())

    stopped = await admin.post(f"/api/staff/generations/{answer.events[0][1]['generation_id']}/stop")
    await answer.read_until(events=("done",))
    hung_up = await asyncio.to_thread(upstream.hung_up.wait, 10)

    generation = await sync_to_async(Generation.objects.select_related("message").get)(conversation=conversation)
    sent = "".join(payload["text"] for name, payload in answer.events if name == "delta")
    assert stopped.status_code == 202 and stopped.json()["status"] == "stop_requested"
    assert answer.events[-1][0] == "done" and answer.events[-1][1]["status"] == "stopped"
    assert (generation.finish_reason, generation.cancelled_by) == ("cancelled", "admin")
    assert generation.message.content == sent and sent.startswith("Alpha beta")
    assert len(sent) < len("".join(upstream.script.chunks))
    assert generation.stop_seen_chars is None and hung_up


@pytest.mark.parametrize("ended", ["signed out elsewhere", "no longer staff", "permission withdrawn",
                                   "password changed", "session expired"])
async def test_the_live_events_end_once_the_admin_may_no_longer_see_them(settings, ended):
    settings.CHAT_WATCH_INTERVAL_SECONDS = 0.2
    admin = AsyncClient()
    await admin.aforce_login(await sync_to_async(factories.staff_member)())
    watched = EventReader(await admin.get(reverse("api:live-events")))
    await watched.until(lambda events: len(events) >= 1)

    if ended == "signed out elsewhere":
        await sync_to_async(Session.objects.all().delete)()
    elif ended == "no longer staff":
        await sync_to_async(get_user_model().objects.update)(is_staff=False)
    elif ended == "password changed":  # by the admin, say: every session of it ends
        def changed():
            member = get_user_model().objects.get()
            member.set_password("a-new-long-password")
            member.save()
        await sync_to_async(changed)()
    elif ended == "session expired":
        await sync_to_async(Session.objects.update)(expire_date=timezone.now() - timedelta(seconds=1))
    else:
        await sync_to_async(lambda: [member.user_permissions.clear()
                                     for member in get_user_model().objects.all()])()

    events = await asyncio.wait_for(watched.to_the_end(), 10)  # it ends: no more of anyone's answers
    assert set(names(events)) == {"live"}
