"""Admins review the audit log in Django admin and cannot rewrite it."""

import pytest
from django.urls import reverse

from common.vocabulary import CancelledBy, FinishReason, GenerationStatus
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(client):
    admin = factories.user(is_staff=True, is_superuser=True)
    client.force_login(admin)
    return client


def test_the_generation_list_shows_timings_and_tokens_with_its_filters(staff_client):
    factories.generation(ttft_ms=123.0, input_tokens=11, output_tokens=22,
                         finish_reason=FinishReason.LENGTH)

    page = staff_client.get(reverse("admin:chatapp_generation_changelist"))

    assert page.status_code == 200
    text = page.content.decode()
    for heading in ["TTFT (ms)", "ITL mean (ms)", "ITL max (ms)", "Input tokens", "Output tokens", "Duration (ms)"]:
        assert heading in text
    for filter_title in ["status", "finish reason", "cancelled by", "model", "started at"]:
        assert f"By {filter_title}" in text
    assert "123.0" in text


def test_the_generation_list_filters_by_finish_reason_and_cancelled_by(staff_client):
    kept = factories.generation(finish_reason=FinishReason.CANCELLED, cancelled_by=CancelledBy.USER)
    factories.generation(finish_reason=FinishReason.STOP)
    url = reverse("admin:chatapp_generation_changelist")

    page = staff_client.get(url, {"finish_reason": "cancelled", "cancelled_by": "user"})

    assert list(page.context["cl"].result_list) == [kept]


def test_the_generation_list_filters_by_status(staff_client):
    stopping = factories.generation(status=GenerationStatus.STOP_REQUESTED)
    factories.generation(status=GenerationStatus.STREAMING)
    factories.generation(finish_reason=FinishReason.STOP)
    url = reverse("admin:chatapp_generation_changelist")

    page = staff_client.get(url, {"status": "stop_requested"})

    assert list(page.context["cl"].result_list) == [stopping]


def test_ttft_and_itl_are_shown_to_a_tenth_of_a_millisecond_in_the_list_and_the_row(staff_client):
    generation = factories.generation(ttft_ms=123.456, itl_mean_ms=45.678, itl_max_ms=99.951,
                                      finish_reason=FinishReason.STOP)

    listed = staff_client.get(reverse("admin:chatapp_generation_changelist")).content.decode()
    row = staff_client.get(reverse("admin:chatapp_generation_change", args=[generation.pk])).content.decode()

    for page in (listed, row):
        assert "123.5" in page and "45.7" in page and "100.0" in page
        assert "123.456" not in page and "45.678" not in page and "99.951" not in page


def test_the_generation_list_finds_a_row_by_request_id_and_by_username(staff_client):
    wanted = factories.generation()
    factories.generation()
    url = reverse("admin:chatapp_generation_changelist")

    by_id = staff_client.get(url, {"q": str(wanted.request_id)})
    by_user = staff_client.get(url, {"q": wanted.user.username})

    assert list(by_id.context["cl"].result_list) == [wanted]
    assert list(by_user.context["cl"].result_list) == [wanted]


def test_the_audit_log_cannot_be_added_to_changed_or_deleted(staff_client):
    generation = factories.generation(final_text="as the user saw it")

    add = staff_client.get(reverse("admin:chatapp_generation_add"))
    change = staff_client.post(
        reverse("admin:chatapp_generation_change", args=[generation.pk]), {"final_text": "edited"}
    )
    delete = staff_client.post(
        reverse("admin:chatapp_generation_delete", args=[generation.pk]), {"post": "yes"}
    )
    generation.refresh_from_db()

    assert add.status_code == 403
    assert change.status_code == 403
    assert delete.status_code == 403
    assert generation.final_text == "as the user saw it"


def test_a_user_who_is_not_staff_cannot_see_the_audit_log(client):
    client.force_login(factories.user())

    page = client.get(reverse("admin:chatapp_generation_changelist"))

    assert page.status_code == 302


def rollup(**fields):
    from datetime import date

    from chatapp.models import DailyRollup

    defaults = {"day": date(2026, 11, 30), "generations": 120, "cancelled": 9, "input_tokens": 4000,
                "output_tokens": 30000, "finish_reasons": {"stop": 100, "length": 11, "cancelled": 9},
                "errors": {"upstream_timeout": 2}, "ttft_p50": 41.26, "ttft_p95": 180.04,
                "itl_p50": 22.51, "itl_p95": 60.0}
    return DailyRollup.objects.create(**{**defaults, **fields})


def test_the_daily_rollups_are_listed_with_their_counts_and_percentiles(staff_client):
    rollup()

    page = staff_client.get(reverse("admin:chatapp_dailyrollup_changelist"))

    text = page.content.decode()
    assert page.status_code == 200
    for shown in ["Nov. 30, 2026", "120", "30000", "41.3", "180.0", "22.5", "60.0"]:
        assert shown in text
    for heading in ["TTFT p50 (ms)", "TTFT p95 (ms)", "ITL p50 (ms)", "ITL p95 (ms)", "Errors"]:
        assert heading in text


def test_the_daily_rollups_are_listed_per_model_and_filter_by_it(staff_client):
    rollup()
    rollup(model="qwen2.5-0.5b", generations=7)

    page = staff_client.get(reverse("admin:chatapp_dailyrollup_changelist"), {"model": "qwen2.5-0.5b"})

    text = page.content.decode()
    assert "By model" in text
    assert list(page.context["cl"].queryset.values_list("model", "generations")) == [("qwen2.5-0.5b", 7)]


def test_a_daily_rollup_cannot_be_added_changed_or_deleted(staff_client):
    day = rollup()

    add = staff_client.get(reverse("admin:chatapp_dailyrollup_add"))
    change = staff_client.post(reverse("admin:chatapp_dailyrollup_change", args=[day.pk]), {"generations": 1})
    delete = staff_client.post(reverse("admin:chatapp_dailyrollup_delete", args=[day.pk]), {"post": "yes"})
    day.refresh_from_db()

    assert (add.status_code, change.status_code, delete.status_code) == (403, 403, 403)
    assert day.generations == 120


def test_a_conversation_and_its_messages_cannot_be_added_changed_reassigned_or_deleted(staff_client):
    conversation = factories.conversation(title="Alice's", system_prompt="Be brief.")
    factories.message(conversation, content="my question")
    someone_else = factories.user()

    add = staff_client.get(reverse("admin:chatapp_conversation_add"))
    change = staff_client.post(reverse("admin:chatapp_conversation_change", args=[conversation.pk]),
                               {"owner": someone_else.pk, "title": "Edited", "system_prompt": "x"})
    delete = staff_client.post(reverse("admin:chatapp_conversation_delete", args=[conversation.pk]),
                               {"post": "yes"})
    shown = staff_client.get(reverse("admin:chatapp_conversation_change", args=[conversation.pk]))
    conversation.refresh_from_db()

    assert (add.status_code, change.status_code, delete.status_code) == (403, 403, 403)
    assert (conversation.owner_id, conversation.title) != (someone_else.pk, "Edited")
    assert conversation.system_prompt == "Be brief." and conversation.messages.count() == 1
    assert shown.status_code == 200 and b"my question" in shown.content  # still there to review


def test_signing_in_to_the_admin_with_an_address_elsewhere_to_go_next_lands_on_the_admin(client):
    """The address was refused (another site), and the admin went to /accounts/profile/: a 404."""
    factories.user(username="ada", password="a-long-test-password", is_staff=True, is_superuser=True)

    signed_in = client.post(reverse("admin:login") + "?next=https://elsewhere.example/",
                            {"username": "ada", "password": "a-long-test-password",
                             "next": "https://elsewhere.example/"})

    assert signed_in.status_code == 302 and signed_in["Location"] == reverse("admin:index")


@pytest.mark.parametrize("model", ["generation", "conversation", "dailyrollup"])
@pytest.mark.parametrize("query", ["model=%00", "model__exact=a%00b"])
def test_a_filter_holding_a_nul_is_a_bad_lookup_not_a_500(staff_client, model, query):
    """PostgreSQL refuses a NUL in text (psycopg's DataError when the list is read): such a
    filter is answered as Django answers any lookup it cannot use, by the list's ?e=1."""
    factories.generation(model="m")

    page = staff_client.get(f"{reverse(f'admin:chatapp_{model}_changelist')}?{query}")

    assert page.status_code in (200, 302)
    if page.status_code == 302:
        assert page["Location"].endswith("?e=1")
