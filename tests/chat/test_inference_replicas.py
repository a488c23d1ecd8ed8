"""Answers spread over several inference replicas, and one that refuses or dies is passed over.

Two stand-in upstreams play the replicas: each counts the answers it was asked for, and one can
be made to refuse or be stopped between requests.
"""

import contextlib
import threading

import pytest
from asgiref.sync import sync_to_async

from chatapp.upstream import inference_replicas
from tests import factories, servers
from tests.chat.streams import read_events, text_of
from tests.fakes.upstream import FakeUpstream, Script

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def replicas(settings):
    """Two stand-in replicas, listed in INFERENCE_URL; each can be stopped with `.stop()`."""
    with contextlib.ExitStack() as running:
        pair = []
        for _ in range(2):
            fake, stopper = FakeUpstream(), contextlib.ExitStack()
            fake.url = stopper.enter_context(servers.uvicorn_in_thread(fake))
            fake.stop = stopper.close
            running.callback(stopper.close)
            pair.append(fake)
        settings.INFERENCE_URL = ",".join(fake.url for fake in pair)
        settings.INFERENCE_AVOID_SECONDS = 600  # longer than any test
        inference_replicas.forget()  # a port used again must not inherit an earlier test's
        yield pair


async def response_to(api, user):
    """The response to a message in a new conversation, its stream not yet read."""
    conversation = await sync_to_async(factories.conversation)(owner=user)
    return await api.post(f"/api/conversations/{conversation.pk}/messages", {"content": "Hi"},
                          content_type="application/json")


async def answer(api, user) -> str:
    response = await response_to(api, user)
    assert response.status_code == 200
    return text_of(await read_events(response))


def asked(fake) -> int:
    return len(fake.requests)


async def test_answers_one_after_another_take_turns_on_the_replicas(api, user, replicas):
    texts = [await answer(api, user) for _ in range(4)]

    assert texts == ["Hello, world!"] * 4
    assert [asked(fake) for fake in replicas] == [2, 2]


async def test_a_new_answer_goes_to_the_replica_with_fewer_open_streams(api, user, replicas):
    gate = threading.Semaphore(0)
    for fake in replicas:
        fake.script.gate = gate
    held = await response_to(api, user)  # its upstream stream stays open until the gate lets go
    busy, idle = sorted(replicas, key=asked, reverse=True)
    for fake in replicas:
        fake.script = Script()  # later answers flow freely; the held one keeps its script

    texts = [await answer(api, user) for _ in range(2)]

    assert texts == ["Hello, world!"] * 2
    assert (asked(busy), asked(idle)) == (1, 2)
    assert text_of(await read_events(held, gate=gate)) == "Hello, world!"


async def test_a_replica_whose_metrics_report_sequences_gets_no_new_answer(api, user, replicas):
    loaded, idle = replicas
    loaded.metrics = ('# HELP inference_running_sequences Sequences in the batch.\n'
                      'inference_running_sequences 3.0\ninference_waiting_sequences 2.0\n')
    idle.metrics = "inference_running_sequences 0.0\ninference_waiting_sequences 0.0\n"
    await inference_replicas.poll()  # what the background poll does every interval

    texts = [await answer(api, user) for _ in range(3)]

    assert texts == ["Hello, world!"] * 3
    assert (asked(loaded), asked(idle)) == (0, 3)


async def test_a_replica_stopped_between_requests_is_skipped_and_the_user_sees_no_error(api, user, replicas):
    dead, alive = replicas
    assert [await answer(api, user) for _ in range(2)] == ["Hello, world!"] * 2
    assert asked(dead) == 1  # it held a pooled connection, now dropped with it

    dead.stop()
    texts = [await answer(api, user) for _ in range(4)]

    assert texts == ["Hello, world!"] * 4
    assert (asked(dead), asked(alive)) == (1, 5)


@pytest.mark.parametrize("status", [500, 503, 429])
async def test_a_replica_that_refuses_passes_the_answer_on_and_is_not_asked_again_for_a_while(
        api, user, replicas, status):
    refusing, other = replicas
    refusing.script.status = status

    texts = [await answer(api, user) for _ in range(4)]

    assert texts == ["Hello, world!"] * 4
    assert asked(refusing) <= 1 and asked(other) == 4


async def test_a_refusal_about_the_request_itself_is_not_sent_to_another_replica(api, user, replicas):
    for fake in replicas:
        fake.script.status = 400

    response = await response_to(api, user)

    assert response.status_code == 502
    assert response.json()["error"]["code"] == "upstream_error"
    assert sum(asked(fake) for fake in replicas) == 1


async def test_when_every_replica_refuses_the_user_gets_the_last_refusal(api, user, replicas):
    for fake in replicas:
        fake.stop()

    response = await response_to(api, user)

    assert response.status_code == 502
    assert response.json()["error"]["code"] == "upstream_unreachable"


async def test_a_single_replica_is_asked_as_before_and_its_metrics_are_never_read(api, user, upstream):
    assert [await answer(api, user) for _ in range(3)] == ["Hello, world!"] * 3

    assert len(upstream.requests) == 3 and upstream.metrics_reads == 0
    assert {headers["host"] for _, headers in upstream.requests} == {upstream_host(upstream)}


def upstream_host(upstream) -> str:
    from django.conf import settings

    return settings.INFERENCE_URL.removeprefix("http://")


async def test_a_resolved_name_stands_for_each_of_its_addresses(api, user, upstream, settings):
    port = settings.INFERENCE_URL.rsplit(":", 1)[1]
    settings.INFERENCE_URL = f"http://localhost:{port}"
    settings.INFERENCE_RESOLVE_REPLICAS = True
    await inference_replicas.poll()

    assert await answer(api, user) == "Hello, world!"

    _, headers = upstream.requests[-1]
    assert headers["host"] in {f"127.0.0.1:{port}", f"[::1]:{port}"}
    assert upstream.metrics_reads >= 1


async def test_an_inference_url_that_names_no_service_serves_no_model_a_503_not_a_crash(api, user, settings):
    settings.INFERENCE_URL = " , "

    response = await response_to(api, user)

    assert response.status_code == 503
    assert response.json()["error"]["code"] == "model_unavailable"


@pytest.mark.parametrize("exposition, load", [
    ("inference_running_sequences 3.0\ninference_waiting_sequences 2.0\ninference_kv_cache_bytes 9e6\n", 5),
    ('vllm:num_requests_running{model_name="m"} 4.0\nvllm:num_requests_waiting{model_name="m"} 1.0\n', 5),
    ("# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 2\n"
     "llamacpp:requests_deferred 0\n", 2),
    ("tgi_queue_size 7\n", None),  # a server whose load we cannot read: our own count stands
])
def test_the_load_is_read_from_our_vllm_and_llama_cpp_metrics(exposition, load):
    assert inference_replicas.load_in(exposition) == load
