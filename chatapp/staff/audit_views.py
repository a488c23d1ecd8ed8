"""The staff audit review page: the generation log's numbers over a period, of every model or
of one (`?model=`), as inline SVG."""

from django.shortcuts import render
from django.utils import timezone

from .audit import BadPeriod, Report, build_report, parse_period
from .permissions import REVIEW_ANSWERS, staff_page
from .rollups import ALL_MODELS, period_totals
from .svg_charts import bar_chart, line_chart


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.0f}"


def _percent(share: float | None) -> str:
    return "" if share is None else f"{share:.1%}"


def _finish_rows(report: Report) -> list[tuple[str, int, str]]:
    total = report.generations or 1  # shares of an empty period are 0%, not a division error
    return [(reason, count, _percent(count / total)) for reason, count in report.finish_reasons]


def _day_rows(report: Report) -> list[dict]:
    return [{"day": day.day, "generations": day.generations, "cancelled": day.cancelled,
             "cancel_rate": _percent(day.cancel_rate),
             "ttft_p50": _ms(day.ttft_p50), "ttft_p95": _ms(day.ttft_p95),
             "itl_p50": _ms(day.itl_p50), "itl_p95": _ms(day.itl_p95)}
            for day in report.days]


def _model_rows(models: list[tuple[str, int]]) -> list[tuple[str, int, str]]:
    """Each model's generations and its share of those whose model is known."""
    total = sum(count for _, count in models) or 1
    return [(model, count, _percent(count / total)) for model, count in models]


def _charts(report: Report, finish_rows: list[tuple[str, int, str]]) -> dict:
    days = report.days
    labels = [day.day.strftime("%m-%d") for day in days]
    cancel_percent = [None if day.cancel_rate is None else day.cancel_rate * 100 for day in days]
    return {
        "finish": bar_chart("Finish reason mix",
                            [(reason, count, f"{count} ({share})")
                             for reason, count, share in finish_rows]),
        "cancel": line_chart("Cancel rate per day", labels,
                             [("cancelled share", cancel_percent)], unit="%"),
        "ttft": line_chart("Time to first token per day (ms)", labels,
                           [("p50", [day.ttft_p50 for day in days]),
                            ("p95", [day.ttft_p95 for day in days])]),
        "itl": line_chart("Inter-token latency per day (ms)", labels,
                          [("p50", [day.itl_p50 for day in days]),
                           ("p95", [day.itl_p95 for day in days])]),
        "errors": bar_chart("Errors by error code",
                            [(code, count, str(count)) for code, count in report.errors]),
    }


@staff_page(REVIEW_ANSWERS)
def audit(request):
    from_text, to_text = request.GET.get("from", ""), request.GET.get("to", "")
    model = request.GET.get("model", ALL_MODELS)
    today = timezone.now().date()
    try:
        period = parse_period(from_text, to_text, today=today)
    except BadPeriod as error:
        # The same page, so the form is right there to fix the dates.
        context = {"error": str(error), "from": from_text, "to": to_text, "model": model,
                   "model_choices": [model] if model else []}
        return render(request, "chatapp/audit.html", context, status=400)
    # Past days from their rollups, the rest (today) from the raw rows: fast with millions of rows.
    totals = period_totals(period, today, model=model)
    report = build_report(period, totals.days)
    finish_rows = _finish_rows(report)
    charts = _charts(report, finish_rows)
    model_rows = _model_rows(totals.models)
    if not model:  # the breakdown of every model's answers; one model's page is one of its bars
        charts["models"] = bar_chart("Generations by model", [(name, count, f"{count} ({share})")
                                                              for name, count, share in model_rows])
    return render(request, "chatapp/audit.html", {
        "from": period.start.isoformat(),
        "to": period.end.isoformat(),
        "model": model,
        # Those seen in the period, and the one asked for even when it is not.
        "model_choices": sorted({name for name, _ in totals.models} | ({model} if model else set())),
        "models": model_rows,
        "days_not_split": totals.days_not_split,
        "report": report,
        "mean_duration": _ms(report.mean_duration_ms),
        "finish_rows": finish_rows,
        "day_rows": _day_rows(report),
        "charts": charts,
    })
