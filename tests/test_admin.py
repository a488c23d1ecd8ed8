"""Admins review the audit log in Django admin and cannot rewrite it."""

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from chatapp.admin import MessageInline
from chatapp.models import Generation, Message
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


def test_a_long_conversations_page_shows_its_newest_messages_and_says_how_many_it_has(staff_client):
    """All of them were drawn: 5,000 messages were 7.8 MB and 6.8 s a page."""
    conversation = factories.conversation(title="Long")
    Message.objects.bulk_create(Message(conversation=conversation, role="user", content=f"message {i}.")
                                for i in range(MessageInline.shown + 5))

    shown = staff_client.get(reverse("admin:chatapp_conversation_change", args=[conversation.pk])).content.decode()

    newest = [f"message {i}." for i in range(5, MessageInline.shown + 5)]
    assert [text in shown for text in ["message 0.", "message 4."]] == [False, False]
    assert all(text in shown for text in newest)
    assert shown.index(newest[0]) < shown.index(newest[-1])  # oldest first, as the page shows them
    assert f"the newest {MessageInline.shown} of {MessageInline.shown + 5}" in shown


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


@pytest.mark.parametrize(("model", "field"), [("generation", "started_at"), ("dailyrollup", "day")])
@pytest.mark.parametrize("dates", ["year=2147483648", "year=99999999999999999999", "year=9999",
                                   "year=9999&month=12", "year=9999&month=12&day=31"])
def test_a_date_past_the_last_year_in_the_date_drill_down_is_a_bad_lookup_not_a_500(staff_client, model, field, dates):
    """The drill-down's bounds are Python datetimes: a year too large for one (OverflowError),
    or whose period ends past 9999 (ValueError, OverflowError), failed the list with a 500."""
    factories.generation(model="m")
    query = "&".join(f"{field}__{part}" for part in dates.split("&"))

    page = staff_client.get(f"{reverse(f'admin:chatapp_{model}_changelist')}?{query}")

    assert page.status_code == 302 and page["Location"].endswith("?e=1")


def test_the_generation_list_finds_rows_by_the_first_digits_of_a_request_id_and_by_part_of_a_username(staff_client):
    ada = factories.conversation(owner=factories.user(username="ada.lovelace"))
    wanted = factories.generation(factories.message(ada, role="assistant"))
    factories.generation()
    url = reverse("admin:chatapp_generation_changelist")

    for term in (str(wanted.request_id)[:8], str(wanted.request_id)[:13].upper(), "lovelace"):
        assert list(staff_client.get(url, {"q": term}).context["cl"].result_list) == [wanted], term


def rows_read_in_vain(queryset) -> list[str]:
    """What PostgreSQL read of the tables and then threw away, running `queryset` (which it
    scans only if no index can do): none where its indexes found the rows wanted."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        plan = queryset.explain(analyze=True)
    return [line.strip() for line in plan.splitlines() if "Rows Removed" in line]


# Read from PostgreSQL's plans: SQLite's (`make run` without DATABASE_URL) hold no row counts.
reads_planned = pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's plans")


@reads_planned
@pytest.mark.parametrize("term", ["request id", "its first digits", "username"])
def test_a_search_of_the_generation_list_reads_the_log_by_its_indexes_not_a_scan_of_it(staff_client, term):
    """Django's own search cast every request id to text and matched it and the username in one
    OR: a scan of the whole log, 2 to 4 s a page at 300,000 rows and growing with it."""
    generation, *others = [factories.generation() for _ in range(10)]
    search = {"request id": str(generation.request_id), "its first digits": str(generation.request_id)[:8],
              "username": generation.user.username}[term]

    listed = staff_client.get(reverse("admin:chatapp_generation_changelist"), {"q": search}).context["cl"]

    assert list(listed.result_list) == [generation]
    assert rows_read_in_vain(listed.queryset) == []


@pytest.mark.parametrize("query", ["", "?status__exact=completed", "?q=user"])
def test_a_page_of_the_generation_list_counts_the_log_once(staff_client, query):
    """Django counts the rows a page's filters leave and then, for "(N total)", the whole log
    again: on a log of 300,000 rows each count took 0.1 to 0.2 s."""
    factories.generation()

    with CaptureQueriesContext(connection) as queries:
        assert staff_client.get(reverse("admin:chatapp_generation_changelist") + query).status_code == 200

    assert len([q for q in queries.captured_queries if "COUNT(" in q["sql"]]) == 1


def rows_read_of_the_log(sql: str) -> int:
    """The rows of chatapp_generation PostgreSQL reads running `sql` (scanning a table only
    where no index can do), those its conditions then threw away included."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql)
        (plan,), = cursor.fetchone()
    pending, read = [plan["Plan"]], 0
    while pending:
        node = pending.pop()
        pending.extend(node.get("Plans", []))
        if node.get("Relation Name") == "chatapp_generation":
            kept_and_thrown = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
            read += kept_and_thrown * node["Actual Loops"]
    return read


@reads_planned
def test_a_page_of_the_generation_list_for_one_day_reads_that_days_rows_not_the_whole_log(staff_client):
    """Each query of the page: the rows, their count, the date drill-down and the model filter's
    choices, which Django read with a DISTINCT over the whole log (0.2 s a page at 300,000 rows)."""
    for n in range(30):
        factories.generation(model=f"model-{n % 2}")
    Generation.objects.update(started_at=timezone.now() - timedelta(days=30))
    today = [factories.generation(model="model-0") for _ in range(2)]

    with CaptureQueriesContext(connection) as queries:
        page = staff_client.get(reverse("admin:chatapp_generation_changelist"),
                                {"started_at__gte": timezone.now().date().isoformat()})

    assert list(page.context["cl"].result_list) == today[::-1]
    reads = {q["sql"][:120]: rows_read_of_the_log(q["sql"]) for q in queries.captured_queries
             if "chatapp_generation" in q["sql"]}
    assert {sql: read for sql, read in reads.items() if read > 5} == {}
    assert "model-1" in page.content.decode()  # a choice of the model filter still
