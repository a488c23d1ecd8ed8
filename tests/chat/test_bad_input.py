"""Input no text field, number or nesting can turn into a 500: each gets a 400 and stores nothing."""

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient

from chatapp.models import Conversation, Generation, Message
from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)

# Raw JSON text: json.dumps would not write a lone surrogate or a NUL the way an attacker can.
NUL = '"a\\u0000b"'
LONE_SURROGATE = '"a\\ud800b"'
BAD_STRINGS = pytest.mark.parametrize("bad", [NUL, LONE_SURROGATE], ids=["nul", "lone_surrogate"])


async def post_raw(client, url: str, body: str):
    return await client.post(url, body, content_type="application/json")


def rows() -> tuple[int, int, int]:
    return Conversation.objects.count(), Message.objects.count(), Generation.objects.count()


def assert_refused(response, code: str = "invalid_value") -> None:
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == code and error["message"]


@BAD_STRINGS
@pytest.mark.parametrize("field", ["username", "password"])
async def test_a_bad_string_in_a_login_field_answers_400(user, bad, field):
    other = "username" if field == "password" else "password"
    response = await post_raw(AsyncClient(), "/api/auth/login", f'{{"{field}": {bad}, "{other}": "x"}}')

    assert_refused(response)


@BAD_STRINGS
@pytest.mark.parametrize("field", ["title", "system_prompt"])
async def test_a_bad_string_in_a_new_conversation_answers_400_and_stores_nothing(api, bad, field):
    before = await sync_to_async(rows)()

    response = await post_raw(api, "/api/conversations", f'{{"{field}": {bad}}}')

    assert_refused(response)
    assert await sync_to_async(rows)() == before


@BAD_STRINGS
@pytest.mark.parametrize("field", ["title", "system_prompt"])
async def test_a_bad_string_in_a_renamed_conversation_answers_400_and_changes_nothing(api, conversation, bad, field):
    response = await api.patch(f"/api/conversations/{conversation.pk}", f'{{"{field}": {bad}}}',
                               content_type="application/json")

    kept = await sync_to_async(Conversation.objects.get)(pk=conversation.pk)
    assert_refused(response)
    assert (kept.title, kept.system_prompt) == (conversation.title, conversation.system_prompt)


@BAD_STRINGS
async def test_a_bad_string_in_a_message_answers_400_and_stores_nothing(api, conversation, upstream, bad):
    before = await sync_to_async(rows)()

    response = await post_raw(api, f"/api/conversations/{conversation.pk}/messages", f'{{"content": {bad}}}')

    assert_refused(response)
    assert await sync_to_async(rows)() == before
    assert upstream.requests == []


@pytest.mark.parametrize("query", ["%00", "a%00b"])
async def test_a_nul_in_the_search_query_answers_400(api, query):
    response = await api.get(f"/api/conversations?q={query}")

    assert_refused(response)


async def test_a_null_title_answers_400_instead_of_storing_the_word_none(api):
    before = await sync_to_async(rows)()

    response = await post_raw(api, "/api/conversations", '{"title": null}')

    assert_refused(response)
    assert await sync_to_async(rows)() == before


async def test_a_number_where_a_title_belongs_answers_400(api):
    assert_refused(await post_raw(api, "/api/conversations", '{"title": 12}'))


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999", "1" + "0" * 5000],
                         ids=["nan", "infinity", "minus_infinity", "overflowing_float", "5001_digits"])
async def test_a_non_finite_or_unreadable_number_anywhere_in_a_body_answers_400(api, conversation, number):
    response = await post_raw(api, "/api/conversations", f'{{"title": "ok", "extra": [{number}]}}')

    assert_refused(response, "invalid_json")


async def test_a_number_of_thousands_of_digits_is_refused_in_words_of_json_not_of_python(api):
    response = await post_raw(api, "/api/conversations", '{"title": "ok", "extra": [' + "1" * 5001 + "]}")

    assert_refused(response, "invalid_json")
    assert response.json()["error"]["message"] == "the body is not valid JSON: a number of 5001 digits is too long"


async def test_json_nested_100000_deep_answers_400(api):
    before = await sync_to_async(rows)()

    response = await post_raw(api, "/api/conversations", '{"title": ' + "[" * 100_000 + "]" * 100_000 + "}")

    assert_refused(response, "invalid_json")
    assert await sync_to_async(rows)() == before


async def test_a_bad_string_nested_deep_in_an_ignored_field_still_answers_400(api):
    response = await post_raw(api, "/api/conversations", f'{{"title": "ok", "extra": {{"a": [{NUL}]}}}}')

    assert_refused(response)


@pytest.mark.parametrize("seen_chars", [2**31, 2**63, 10**30])
async def test_a_stop_with_seen_chars_beyond_any_answer_answers_400(api, conversation, seen_chars):
    generation = await sync_to_async(factories.generation)(
        await sync_to_async(factories.message)(conversation, role=Message.Role.ASSISTANT))

    response = await post_raw(api, f"/api/generations/{generation.pk}/stop", f'{{"seen_chars": {seen_chars}}}')

    kept = await sync_to_async(Generation.objects.get)(pk=generation.pk)
    assert_refused(response)
    assert kept.stop_seen_chars is None


@pytest.mark.parametrize("last_message_id", ['"7"', "true", "0", "-1", "1.5", str(2**63), "[7]"])
async def test_a_regenerate_or_edit_naming_no_possible_message_as_the_last_shown_answers_400(
        api, conversation, last_message_id):
    question = await sync_to_async(factories.message)(conversation, role=Message.Role.USER)
    await sync_to_async(factories.message)(conversation, role=Message.Role.ASSISTANT)
    before = await sync_to_async(rows)()

    regenerated = await post_raw(api, f"/api/conversations/{conversation.pk}/regenerate",
                                 f'{{"last_message_id": {last_message_id}}}')
    edited = await post_raw(api, f"/api/messages/{question.pk}/edit",
                            f'{{"content": "again", "last_message_id": {last_message_id}}}')

    assert_refused(regenerated)
    assert_refused(edited)
    assert await sync_to_async(rows)() == before


@pytest.mark.parametrize("chars", ['"7"', "true", "-1", "1.5", str(2**31), "[7]"])
async def test_a_regenerate_or_edit_naming_no_possible_length_of_the_last_shown_answers_400(
        api, conversation, chars):
    question = await sync_to_async(factories.message)(conversation, role=Message.Role.USER)
    answer = await sync_to_async(factories.message)(conversation, role=Message.Role.ASSISTANT)
    before = await sync_to_async(rows)()
    shown = f'"last_message_id": {answer.pk}, "last_message_chars": {chars}'

    regenerated = await post_raw(api, f"/api/conversations/{conversation.pk}/regenerate", f"{{{shown}}}")
    edited = await post_raw(api, f"/api/messages/{question.pk}/edit", f'{{"content": "again", {shown}}}')

    assert_refused(regenerated)
    assert_refused(edited)
    assert await sync_to_async(rows)() == before


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "application/xml"])
async def test_a_json_body_sent_as_another_media_type_answers_415_and_stores_nothing(api, content_type):
    """A body said to be text or a form was read as JSON all the same (`curl -d` sends a form)."""
    before = await sync_to_async(rows)()

    response = await api.post("/api/conversations", '{"title": "x"}', content_type=content_type)

    assert response.status_code == 415, response.content
    assert response.json()["error"]["code"] == "unsupported_media_type"
    assert "application/json" in response.json()["error"]["message"]
    assert await sync_to_async(rows)() == before


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8",
                                          "application/merge-patch+json"])
async def test_a_json_body_is_read_under_any_json_media_type(api, content_type):
    response = await api.post("/api/conversations", '{"title": "x"}', content_type=content_type)

    assert response.status_code == 201, response.content


async def test_a_post_without_a_body_needs_no_media_type(api):
    response = await api.post("/api/conversations", b"", content_type="")

    assert response.status_code == 201, response.content
