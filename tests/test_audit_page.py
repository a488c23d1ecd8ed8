"""Staff review the generation log over a period on one page of server-drawn SVG charts."""

from datetime import UTC, date, datetime, timedelta

import pytest
from django.urls import reverse
from django.utils.html import escape

from chatapp.staff.audit import BadPeriod, parse_period
from chatapp.models import Generation
from chatapp.staff.svg_charts import line_chart
from common.vocabulary import CancelledBy, FinishReason
from tests import factories

pytestmark = pytest.mark.django_db

DAY_ONE = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)
PERIOD = {"from": "2026-03-01", "to": "2026-03-03"}
HEADINGS = ["Generations by model", "Finish reason mix", "Cancel rate per day", "Time to first token per day",
            "Inter-token latency per day", "Errors by error code"]


@pytest.fixture
def staff_client(client):
    client.force_login(factories.staff_member())
    return client


def started(at: datetime, **fields) -> Generation:
    """A generation that started at `at`: started_at is auto_now_add, so set it afterwards."""
    generation = factories.generation(**fields)
    Generation.objects.filter(pk=generation.pk).update(started_at=at)
    return generation


def audit_page(client, **params):
    return client.get(reverse("staff-audit"), params or PERIOD)


def test_staff_see_every_chart_with_its_heading_and_an_svg(staff_client):
    started(DAY_ONE, finish_reason=FinishReason.STOP, ttft_ms=100.0, itl_mean_ms=20.0)

    page = audit_page(staff_client)

    text = page.content.decode()
    assert page.status_code == 200
    for heading in HEADINGS:
        assert f"<h2>{heading}</h2>" in text
    assert text.count("<svg ") == len(HEADINGS)
    assert "itl_mean_ms" in text  # the page says what one ITL sample is


@pytest.mark.parametrize("is_staff", [False, None], ids=["a plain user", "anonymous"])
def test_anyone_who_is_not_staff_is_sent_to_the_admin_login(client, is_staff):
    if is_staff is not None:
        client.force_login(factories.user(is_staff=is_staff))

    page = audit_page(client)

    assert page.status_code == 302
    assert page.url.startswith(reverse("admin:login"))


def test_staff_not_granted_the_review_of_answers_are_refused(client):
    client.force_login(factories.staff_member("chatapp.view_conversation"))

    assert audit_page(client).status_code == 403


def test_the_finish_reason_mix_counts_every_reason_and_the_ones_still_streaming(staff_client):
    for reason, count in [(FinishReason.STOP, 3), (FinishReason.LENGTH, 1),
                          (FinishReason.CANCELLED, 2), ("", 1)]:
        for _ in range(count):
            started(DAY_ONE, finish_reason=reason)

    page = audit_page(staff_client)

    assert dict(page.context["report"].finish_reasons) == {
        "stop": 3, "length": 1, "content_filter": 0, "cancelled": 2, "error": 0, "in progress": 1,
    }
    assert "3 (42.9%)" in page.context["charts"]["finish"]


def test_ttft_p50_and_p95_are_nearest_rank_per_day_with_gaps_for_empty_days(staff_client):
    for ttft in [400.0, 100.0, 1000.0, 300.0, 200.0]:
        started(DAY_ONE, ttft_ms=ttft)
    started(DAY_ONE + timedelta(days=2), ttft_ms=50.0)
    started(DAY_ONE + timedelta(days=2), ttft_ms=None)  # not yet at its first token

    days = audit_page(staff_client).context["report"].days

    assert [(day.ttft_p50, day.ttft_p95) for day in days] == [
        (300.0, 1000.0), (None, None), (50.0, 50.0)]
    assert [day.generations for day in days] == [5, 0, 2]
    assert days[1].cancel_rate is None


def test_generations_outside_the_period_are_left_out(staff_client):
    started(datetime(2026, 2, 28, 23, 59, 59, tzinfo=UTC), finish_reason=FinishReason.ERROR)
    started(DAY_ONE, finish_reason=FinishReason.STOP)
    started(datetime(2026, 3, 4, tzinfo=UTC), finish_reason=FinishReason.ERROR)

    report = audit_page(staff_client).context["report"]

    assert report.generations == 1
    assert report.errors == []


def test_the_totals_sum_tokens_and_average_finished_durations(staff_client):
    second = timedelta(seconds=1)
    started(DAY_ONE, input_tokens=10, output_tokens=5, finished_at=DAY_ONE + second)
    started(DAY_ONE, input_tokens=20, output_tokens=None, finished_at=DAY_ONE + 3 * second)
    started(DAY_ONE)  # still streaming: counted, but has no duration

    report = audit_page(staff_client).context["report"]

    assert (report.generations, report.input_tokens, report.output_tokens) == (3, 30, 5)
    assert report.mean_duration_ms == 2000.0


def test_cancellations_are_counted_per_day_and_by_who_cancelled(staff_client):
    started(DAY_ONE, finish_reason=FinishReason.CANCELLED, cancelled_by=CancelledBy.USER)
    started(DAY_ONE, finish_reason=FinishReason.CANCELLED, cancelled_by=CancelledBy.USER)
    started(DAY_ONE, finish_reason=FinishReason.CANCELLED, cancelled_by=CancelledBy.TIMEOUT)
    started(DAY_ONE, finish_reason=FinishReason.STOP)

    report = audit_page(staff_client).context["report"]

    assert report.days[0].cancel_rate == 0.75
    assert report.cancelled_by == [("user", 2), ("timeout", 1)]


@pytest.mark.parametrize("params", [
    {"from": "yesterday"}, {"to": "2026-02-30"}, {"from": "2026-03-02", "to": "2026-03-01"},
    {"from": "2020-01-01", "to": "2026-01-01"},
    {"from": "9999-12-30", "to": "9999-12-31"}, {"to": "0001-01-05"},  # days past the calendar's ends
])
def test_a_bad_period_gives_400_with_the_reason(staff_client, params):
    page = audit_page(staff_client, **params)

    assert page.status_code == 400
    assert escape(page.context["error"]) in page.content.decode()
    assert "<svg" not in page.content.decode()


def test_an_error_code_with_markup_is_escaped_in_the_chart_and_the_table(staff_client):
    code = '<script>alert("x")</script>'
    started(DAY_ONE, finish_reason=FinishReason.ERROR, error_code=code)

    page = audit_page(staff_client)

    text = page.content.decode()
    assert "<script" not in text
    assert "&lt;script&gt;" in page.context["charts"]["errors"]
    assert "<td>&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;</td>" in text


def test_the_period_defaults_to_the_fourteen_days_ending_today():
    period = parse_period(None, None, today=date(2026, 3, 14))

    assert (period.start, period.end) == (date(2026, 3, 1), date(2026, 3, 14))
    assert len(period.days) == 14


def test_a_period_may_be_a_single_day_and_rejects_a_bad_date():
    assert parse_period("2026-03-01", "2026-03-01", today=date(2026, 5, 1)).days == [
        date(2026, 3, 1)]
    with pytest.raises(BadPeriod, match="YYYY-MM-DD"):
        parse_period("03/01/2026", None, today=date(2026, 5, 1))


def test_a_line_chart_breaks_its_line_at_a_missing_day():
    svg = line_chart("t", ["a", "b", "c", "d"], [("p50", [1.0, 2.0, None, 3.0])])

    assert svg.count("<polyline") == 1
    assert svg.count("<circle") == 3
    assert 'aria-label="t"' in svg and "<title>t</title>" in svg


OURS, THEIRS = "SmolLM2-135M-Instruct", "qwen2.5-0.5b"


@pytest.fixture
def two_models():
    """One day of each model's answers, different in every figure the page draws."""
    second = timedelta(seconds=1)
    started(DAY_ONE, model=OURS, finish_reason=FinishReason.STOP, ttft_ms=100.0, itl_mean_ms=10.0,
            input_tokens=10, output_tokens=20, finished_at=DAY_ONE + second)
    started(DAY_ONE, model=OURS, finish_reason=FinishReason.CANCELLED, cancelled_by=CancelledBy.USER,
            ttft_ms=300.0, itl_mean_ms=30.0, input_tokens=10, output_tokens=5, finished_at=DAY_ONE + 3 * second)
    started(DAY_ONE, model=THEIRS, finish_reason=FinishReason.ERROR, error_code="upstream_refused",
            input_tokens=7, finished_at=DAY_ONE + 9 * second)
    started(DAY_ONE + timedelta(days=2), model=THEIRS, finish_reason=FinishReason.CANCELLED,
            cancelled_by=CancelledBy.ADMIN, ttft_ms=900.0, itl_mean_ms=90.0, output_tokens=50)


def test_the_model_filter_narrows_every_figure_to_that_models_answers(staff_client, two_models):
    ours = audit_page(staff_client, **PERIOD, model=OURS).context
    theirs = audit_page(staff_client, **PERIOD, model=THEIRS).context

    assert (ours["report"].generations, ours["report"].input_tokens, ours["report"].output_tokens) == (2, 20, 25)
    assert ours["report"].mean_duration_ms == 2000.0
    assert dict(ours["report"].finish_reasons)["stop"] == 1 and dict(ours["report"].finish_reasons)["error"] == 0
    assert ours["report"].cancelled_by == [("user", 1)] and ours["report"].errors == []
    assert [(day.ttft_p50, day.itl_p95, day.cancel_rate) for day in ours["report"].days] == [
        (100.0, 30.0, 0.5), (None, None, None), (None, None, None)]
    assert (theirs["report"].generations, theirs["report"].input_tokens, theirs["report"].output_tokens) == (2, 7, 50)
    assert theirs["report"].cancelled_by == [("admin", 1)] and theirs["report"].errors == [("upstream_refused", 1)]
    assert [(day.ttft_p50, day.cancel_rate) for day in theirs["report"].days] == [
        (None, 0.0), (None, None), (900.0, 1.0)]
    # Every chart is drawn from the narrowed figures: no chart of one model shows the other's.
    assert "upstream_refused" in theirs["charts"]["errors"] and "upstream_refused" not in ours["charts"]["errors"]
    assert all(ours["charts"][name] != theirs["charts"][name] for name in ours["charts"])


def test_without_a_model_the_page_counts_every_model_and_shows_each_ones_share(staff_client, two_models):
    page = audit_page(staff_client)

    text = page.content.decode()
    assert page.context["report"].generations == 4
    assert page.context["models"] == [(OURS, 2, "50.0%"), (THEIRS, 2, "50.0%")]
    assert "<h2>Generations by model</h2>" in text
    assert f'href="?from=2026-03-01&amp;to=2026-03-03&amp;model={THEIRS}"' in text


def test_the_model_chooser_lists_the_models_seen_and_keeps_the_one_chosen(staff_client, two_models):
    page = audit_page(staff_client, **PERIOD, model=OURS)

    text = page.content.decode()
    assert '<option value="">All models</option>' in text
    assert f'<option value="{OURS}" selected>{OURS}</option>' in text
    assert f'<option value="{THEIRS}">{THEIRS}</option>' in text
    assert f"<h1>Generation audit: {OURS}</h1>" in text


def test_a_model_with_no_answers_in_the_period_gives_an_empty_page_not_an_error(staff_client, two_models):
    page = audit_page(staff_client, **PERIOD, model="gone-model")

    assert page.status_code == 200
    assert page.context["report"].generations == 0
    assert '<option value="gone-model" selected>gone-model</option>' in page.content.decode()


@pytest.mark.parametrize("is_staff", [False, None], ids=["a plain user", "anonymous"])
def test_anyone_who_is_not_staff_is_refused_a_models_figures(client, two_models, is_staff):
    if is_staff is not None:
        client.force_login(factories.user(is_staff=is_staff))

    page = audit_page(client, **PERIOD, model=OURS)

    assert page.status_code == 302
    assert page.url.startswith(reverse("admin:login"))
